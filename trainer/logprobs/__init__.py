"""Per-sequence log-probs (``logprobs``), their chunked path through the LM head (``chunked_logprobs``) and the
shared-prompt forward (``shared_prompt``), which every trainer's step uses; the DPO recipe's micro-batch of preference
pairs is ``trainer/dpo/pairs.py``. The policy, its reference and every model load live in
:mod:`selectrust.model`; the optimizer and LR schedule in ``trainer/runtime/optim.py``."""
