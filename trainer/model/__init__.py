"""Per-sequence log-probs (``logprobs``), their chunked path through the LM head (``chunked_logprobs``) and the
shared-prompt forward (``shared_prompt``), and the DPO recipe's micro-batch of preference pairs (``pairs``: collation,
log-probs, the precomputed reference table). The policy, its reference and every model load live in
:mod:`selectrust.model`; the optimizer and LR schedule in ``trainer/core/optim.py``."""
