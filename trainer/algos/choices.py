"""The value sets of the algorithms' choice-valued settings (standard library only, no torch), so the
config schemas (:mod:`trainer.config.choices`) can offer them without importing the tensor code.

Each algorithm module imports its tuple from here and checks its argument against it.
"""

#: sft.masked_nll_loss / grpo aggregation: how per-token values reduce to a scalar.
AGGREGATIONS = ("token_mean", "sequence_mean")
#: grpo.group_advantages: what the advantages are divided by.
STD_SCALINGS = ("group", "batch", "none")
#: distill.topk_forward_kl: whose top-k tokens form the support.
SUPPORTS = ("teacher", "student", "union")
#: is_correction.truncated_is_weights: token- or sequence-level importance ratios.
LEVELS = ("token", "sequence")
#: grpo.sft_coef_at: how the weight of GRPO's SFT term (CHORD) moves over training.
SFT_SCHEDULES = ("constant", "linear_decay")
#: GRPO's rollout modes (``algo.rollout_mode``; ``algo.env`` selects the environment mode instead): single_turn (G
#: completions per prompt, group advantages) | paired_context (Knowledgeable-R1: G with the row's context, G without,
#: trainer/rl/paired_rollouts.py, advantages of paired_context.paired_context_advantages).
ROLLOUT_MODES = ("single_turn", "paired_context")
#: paired_context, per sample of algo.group_size: completions generated (with and without the context) and rows
#: trained (CK, RPK, PK); the config checks size a round and a step's batch with them.
PAIRED_COMPLETIONS, PAIRED_ROWS = 2, 3
