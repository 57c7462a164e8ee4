"""GRPO's own machinery: rollouts as a batch source (``rollout``), multi-turn environments (``envs``),
reward functions (``rewards``), the registries that name environments and rewards (``callables``) and the adapter
sync before each rollout batch (``rollout_sync``, over ``trainer/eval_bridge/weight_sync.py``)."""
