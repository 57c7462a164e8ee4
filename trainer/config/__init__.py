"""Typed config: the single home of every default, its help text and its checks.

Modules, each with one job (none imports torch, so ``--help`` and composition stay light):

- :mod:`~trainer.config.choices`: :class:`Choice` and the choice-valued field kinds (their value sets come
  from :mod:`trainer.algos.choices`, :mod:`trainer.data.choices` and :mod:`eval_hooks.vocab`);
- :mod:`~trainer.config.schemas`: the group schemas (model, optim, trainer, eval, data, algo, ...) and
  :func:`schema_field`;
- :mod:`~trainer.config.roots`: one root schema per entry point;
- :mod:`~trainer.config.registry`: :data:`SCHEMAS` and their registration with Hydra's ConfigStore;
- :mod:`~trainer.config.validation`: ``validate_<recipe>`` and :class:`ConfigError`, run before any model loads;
- :mod:`~trainer.config.cli_help`: ``python recipes/<x>.py --help``.

The names below are the package's public interface (``from trainer.config import validate_dpo``).
"""

from trainer.config.choices import Aggregation, Backend, Choice, Device, DistillMode, DistillPipelineKind, DistillPromptStyle, DistillSource, DistillStage, DistillTeacher, Dtype, Family, ISCorrection, InitAdapterMode, LoggerKind, MedFormat, MedJudge, MedMitigation, MixedPrecision, OnInvalid, Pairing, Reference, Scheduler, StdScaling, TopkSupport, Truncation, Weighting  # noqa: F401
from trainer.config.schemas import AdviceConfig, ChainTrainerConfig, DPOAlgoConfig, DataConfig, DistillAlgoConfig, DistillDataConfig, DistillPipelineConfig, EvalConfig, GRPOAlgoConfig, GenerationConfig, KnowledgeConfig, generation_schema, LoggerConfig, LoraConfig, MedEvalConfig, ModelConfig, OptimConfig, PromptConfig, SFTAlgoConfig, StageConfig, TrainerConfig, schema_field  # noqa: F401
from trainer.config.roots import ChainRunConfig, DPORunConfig, DistillRunConfig, EvaluateRunConfig, GRPORunConfig, MergeRunConfig, MineRunConfig, SFTRunConfig  # noqa: F401
from trainer.config.registry import SCHEMAS, register_schema, register_schemas  # noqa: F401
from trainer.config.validation import ConfigError, check_adapter_dir, check_adapter_weights, check_real_model_settings, check_grpo_geometry, check_known_keys, validate_common, validate_distill, validate_dpo, validate_grpo, validate_knowledge, validate_merge, validate_sft  # noqa: F401
from trainer.config.cli_help import cli_main, exit_with_help_if_asked, help_text, render_help  # noqa: F401
