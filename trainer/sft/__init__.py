"""The SFT trainer's own code: its examples (``data``: loading, multi-turn masks, the length policy, collation) and
its step (``step``); the loss is pure torch in ``trainer/algos/sft.py``, the entry point ``recipes/sft.py``."""
