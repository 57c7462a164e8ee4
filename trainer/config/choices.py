"""The choice-valued config fields: :class:`Choice` and one subclass per field kind.

A field typed with one refuses any other value at composition. Where an algorithm, data or evaluation
module owns the value set, the tuple comes from its torch-free home (:mod:`trainer.algos.choices`,
:mod:`trainer.data.choices`, :mod:`eval_hooks.vocab`, :mod:`eval_hooks.families`), so importing this module
does not import torch.
"""

from __future__ import annotations

from enum import Enum

from eval_hooks.families import FAMILIES
from eval_hooks.knowledge import SCORES as KNOWLEDGE_SCORES
from eval_hooks.vocab import MED_FORMATS, MED_MITIGATIONS
from trainer.algos.choices import AGGREGATIONS, DPO_LOSS_TYPES, STD_SCALINGS
from trainer.algos.choices import LEVELS as IS_LEVELS
from trainer.algos.choices import SUPPORTS as TOPK_SUPPORTS
from trainer.data.choices import ON_INVALID, TRUNCATIONS, WEIGHTINGS


class Choice(str, Enum):
    """A value from a fixed set. A field typed with one refuses any other value at composition (YAML files
    and the command line give the plain name); a member is a ``str`` equal to its name, so code compares,
    hashes, formats and serialises it as that plain string."""

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)

    def __repr__(self) -> str:  # messages such as "saved 'x' != now 'y'" read as for a str
        return repr(self.value)


def _choices(name: str, values) -> type[Choice]:
    """A :class:`Choice` over ``values``: built from the tuple the code that acts on the value checks."""
    return Choice(name, [(v, v) for v in values], module=__name__, qualname=name)


# One per choice-valued field; where an algorithm or data module owns the tuple, it comes from there.
Dtype = _choices("Dtype", ("float32", "bfloat16", "float16"))
InitAdapterMode = _choices("InitAdapterMode", ("merge", "continue"))
Scheduler = _choices("Scheduler", ("cosine", "linear", "constant"))
Device = _choices("Device", ("auto", "cpu"))
MixedPrecision = _choices("MixedPrecision", ("no", "bf16", "fp16", "auto"))
Truncation = _choices("Truncation", TRUNCATIONS)
OnInvalid = _choices("OnInvalid", ON_INVALID)
Family = _choices("Family", tuple(FAMILIES))
Backend = _choices("Backend", ("hf", "vllm_server", "openai_chat"))
ServerKind = _choices("ServerKind", ("auto", "vllm", "llama_cpp", "openai"))
LoggerKind = _choices("LoggerKind", ("jsonl", "wandb"))
MedFormat = _choices("MedFormat", MED_FORMATS)
MedMitigation = _choices("MedMitigation", MED_MITIGATIONS)
MedJudge = _choices("MedJudge", ("keyword", "self"))
Weighting = _choices("Weighting", WEIGHTINGS)
Pairing = _choices("Pairing", ("matched", "unmatched"))
Reference = _choices("Reference", ("auto", "precomputed"))
DPOLossType = _choices("DPOLossType", DPO_LOSS_TYPES)
Aggregation = _choices("Aggregation", AGGREGATIONS)
StdScaling = _choices("StdScaling", STD_SCALINGS)
ISCorrection = _choices("ISCorrection", ("none", *IS_LEVELS))
DistillStage = _choices("DistillStage", ("kl", "calibration"))
DistillMode = _choices("DistillMode", ("teacher_tokens", "on_policy"))
DistillTeacher = _choices("DistillTeacher", ("initial", "current"))
TopkSupport = _choices("TopkSupport", TOPK_SUPPORTS)
DistillSource = _choices("DistillSource", ("files", "toy", "mist"))  # mist: the old spelling of pipeline.kind=opsd
DistillPipelineKind = _choices("DistillPipelineKind", ("taste", "opsd"))
DistillPromptStyle = _choices("DistillPromptStyle", ("taste", "compact", "mist"))
KnowledgeScore = _choices("KnowledgeScore", KNOWLEDGE_SCORES)
