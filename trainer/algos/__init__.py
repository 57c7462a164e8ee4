"""Pure tensor math for training: losses, advantages, KL terms (torch only; no models, no configs).

Modules and their public functions (see each module docstring for shapes and formulas):

- ``dpo``: ``sigmoid_dpo_loss``, ``simpo_loss``, ``dpo_row_metrics``, ``per_group_metrics``
- ``sft``: ``masked_nll_loss``
- ``grpo``: ``group_advantages``, ``clipped_policy_loss``, ``k3_kl``
- ``distill``: ``topk_forward_kl``, ``choice_kl``, ``choice_ce``
- ``is_correction``: ``truncated_is_weights``
- ``choices``: the value sets of their choice-valued settings (standard library only)

The names below are imported on first use (PEP 562), so ``import trainer.algos.choices`` (the config
schemas do) does not import torch.
"""

import importlib

_HOMES = {
    "choice_ce": "distill", "choice_kl": "distill", "topk_forward_kl": "distill",
    "dpo_row_metrics": "dpo", "per_group_metrics": "dpo", "sigmoid_dpo_loss": "dpo", "simpo_loss": "dpo",
    "clipped_policy_loss": "grpo", "group_advantages": "grpo", "k3_kl": "grpo",
    "truncated_is_weights": "is_correction",
    "masked_nll_loss": "sft",
}

__all__ = list(_HOMES)


def __getattr__(name: str):
    if name in _HOMES:
        return getattr(importlib.import_module(f"trainer.algos.{_HOMES[name]}"), name)
    raise AttributeError(f"module 'trainer.algos' has no attribute {name!r}")
