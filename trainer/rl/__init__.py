"""GRPO's own machinery, its one home (the entry point is ``recipes/grpo.py``; the loss functions are pure torch in
``trainer/algos/grpo.py``): its step (``step``: ``grpo_step`` with CHORD's SFT term), rollouts as a batch source
(``rollout``, over its prompt rows), multi-turn environments (``envs``), reward functions (``rewards``), the
registries that name environments and rewards (``callables``) and the adapter sync before each rollout batch
(``rollout_sync``, over ``trainer/eval_bridge/weight_sync.py``)."""
