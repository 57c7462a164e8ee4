"""The DPO trainer's own code, its one home (the entry point is ``recipes/dpo.py``; the loss functions are pure
torch in ``trainer/algos/dpo.py``): its pairs (``data``: validated quartets, the unmatched ablation, the pairs'
length policy), the DPO-style losses by name (``losses``: the ``DPO_LOSSES`` registry, torch-free, so the config
offers and checks ``algo.loss_type`` without torch), the micro-batch of pairs (``pairs``: collation, packed
shared-prompt rows, log-probs, the precomputed reference table) and its step (``step``: ``dpo_step``)."""
