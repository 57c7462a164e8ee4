"""Pure tensor math for training: losses, advantages, KL terms (torch only; no models, no configs).

Modules and their public functions (see each module docstring for shapes and formulas); import them from their
module (``from trainer.algos.dpo import sigmoid_dpo_loss``), so ``import trainer.algos.choices`` (the config schemas
do) does not import torch:

- ``dpo``: ``sigmoid_dpo_loss``, ``simpo_loss``, ``dpo_row_metrics``, ``per_group_metrics``
- ``sft``: ``masked_nll_loss``
- ``grpo``: ``group_advantages``, ``clipped_policy_loss``, ``k3_kl``
- ``paired_context``: ``paired_context_advantages`` (Knowledgeable-R1's paired rollouts)
- ``distill``: ``topk_forward_kl``, ``choice_kl``, ``choice_ce``
- ``is_correction``: ``truncated_is_weights``
- ``choices``: the value sets of their choice-valued settings (standard library only)
"""
