"""GRPO's own machinery: rollouts as a batch source (``rollout``), multi-turn environments (``envs``),
reward functions (``rewards``) and adapter weight sync to a generation server (``weight_sync``)."""
