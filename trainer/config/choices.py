"""The choice-valued config fields: one :class:`Choice` subclass per field kind (:class:`Choice` itself is
declared in :mod:`selectrust.core.settings`, where the evaluation families type their own settings' choices).

A field typed with one refuses any other value at composition. Where an algorithm, data or evaluation
module owns the value set, the tuple comes from its torch-free home (:mod:`trainer.algos.choices`,
:mod:`trainer.data.choices`, :mod:`trainer.dpo.losses`, :mod:`eval_hooks.families`,
:mod:`selectrust.generation.backends`), so importing this module does not import torch; where the value selects
code, from the registry or table the code looks it up in (docs/architecture.md, "Choice kinds and their
dispatch", lists every kind, where its value is dispatched, and why a plain value is one). A generation backend's
own choice-valued settings (e.g. ``server_kind``) become fields of this kind in
:func:`trainer.config.schemas.generation_schema`.
"""

from __future__ import annotations

from selectrust.generation.backends import BACKENDS
from eval_hooks.families import FAMILIES
from eval_hooks.knowledge import SCORES as KNOWLEDGE_SCORES
from selectrust.core.settings import Choice, choice_type
from trainer.algos.choices import AGGREGATIONS, ROLLOUT_MODES, SFT_SCHEDULES, STD_SCALINGS
from trainer.algos.choices import LEVELS as IS_LEVELS
from trainer.algos.choices import SUPPORTS as TOPK_SUPPORTS
from trainer.data.choices import ON_INVALID, TRUNCATIONS, WEIGHTINGS
from trainer.distill.stages import STAGE_STEPS
from trainer.dpo.losses import DPO_LOSSES
from trainer.rl.sft_rules import SFT_ROW_RULES
from trainer.runtime.lr_decay import DECAYS
from selectrust.model.settings import Dtype, InitAdapterMode  # noqa: F401  (the model group's, in the foundation)


def _choices(name: str, values) -> type[Choice]:
    """A :class:`Choice` over ``values``: built from the tuple the code that acts on the value checks."""
    return choice_type(name, values, __name__)


# One per choice-valued field; where an algorithm or data module owns the tuple, it comes from there.
Scheduler = _choices("Scheduler", tuple(DECAYS))  # the LR decay table
Device = _choices("Device", ("auto", "cpu"))
RunDirLayout = _choices("RunDirLayout", ("auto", "shared", "node_local"))
MixedPrecision = _choices("MixedPrecision", ("no", "bf16", "fp16", "auto"))
Truncation = _choices("Truncation", TRUNCATIONS)
OnInvalid = _choices("OnInvalid", ON_INVALID)
Family = _choices("Family", tuple(FAMILIES))
Backend = _choices("Backend", tuple(BACKENDS))  # the backend registry
LoggerKind = _choices("LoggerKind", ("jsonl", "wandb"))
Weighting = _choices("Weighting", WEIGHTINGS)
Pairing = _choices("Pairing", ("matched", "unmatched"))
Reference = _choices("Reference", ("auto", "precomputed"))
DPOLossType = _choices("DPOLossType", tuple(DPO_LOSSES))  # the DPO loss registry (torch-free)
Aggregation = _choices("Aggregation", AGGREGATIONS)
StdScaling = _choices("StdScaling", STD_SCALINGS)
ISCorrection = _choices("ISCorrection", ("none", *IS_LEVELS))
SftSchedule = _choices("SftSchedule", SFT_SCHEDULES)
SftRows = _choices("SftRows", tuple(SFT_ROW_RULES))  # the SFT row rule table
RolloutModeName = _choices("RolloutModeName", ROLLOUT_MODES)
DistillStage = _choices("DistillStage", tuple(STAGE_STEPS))  # the stage step table
DistillMode = _choices("DistillMode", ("teacher_tokens", "on_policy"))
DistillTeacher = _choices("DistillTeacher", ("initial", "current"))
TopkSupport = _choices("TopkSupport", TOPK_SUPPORTS)
DistillSource = _choices("DistillSource", ("files", "toy", "mist"))  # mist: the old spelling of pipeline.kind=opsd
DistillPipelineKind = _choices("DistillPipelineKind", ("taste", "opsd"))
DistillPromptStyle = _choices("DistillPromptStyle", ("taste", "compact", "mist"))
KnowledgeScore = _choices("KnowledgeScore", KNOWLEDGE_SCORES)
