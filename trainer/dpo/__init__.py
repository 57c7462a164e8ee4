"""The DPO trainer's own code (``recipes/dpo.py`` is its entry point and holds its step): the DPO-style losses by
name (``losses``: the ``DPO_LOSSES`` registry, torch-free, so the config offers and checks ``algo.loss_type``
without torch; the loss functions themselves are pure torch in ``trainer/algos/dpo.py``) and the micro-batch of
preference pairs (``pairs``: collation, packed shared-prompt rows, log-probs, the precomputed reference table)."""
