"""Pure tensor math for training: losses, advantages, KL terms (torch only; no models, no configs).

Modules and their public functions (see each module docstring for shapes and formulas):

- ``dpo``: ``sigmoid_dpo_loss``, ``dpo_row_metrics``, ``per_group_metrics``
- ``sft``: ``masked_nll_loss``
- ``grpo``: ``group_advantages``, ``clipped_policy_loss``, ``k3_kl``
- ``distill``: ``topk_forward_kl``, ``choice_kl``, ``choice_ce``
- ``is_correction``: ``truncated_is_weights``
"""

from trainer.algos.distill import choice_ce, choice_kl, topk_forward_kl
from trainer.algos.dpo import dpo_row_metrics, per_group_metrics, sigmoid_dpo_loss
from trainer.algos.grpo import clipped_policy_loss, group_advantages, k3_kl
from trainer.algos.is_correction import truncated_is_weights
from trainer.algos.sft import masked_nll_loss

__all__ = [
    "choice_ce", "choice_kl", "topk_forward_kl",
    "dpo_row_metrics", "per_group_metrics", "sigmoid_dpo_loss",
    "clipped_policy_loss", "group_advantages", "k3_kl",
    "truncated_is_weights",
    "masked_nll_loss",
]
