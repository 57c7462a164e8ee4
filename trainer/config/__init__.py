"""Typed config: the single home of every default, its help text and its checks.

Modules, each with one job (none imports torch, so ``--help`` and composition stay light):

- :mod:`~trainer.config.choices`: the choice-valued field kinds (:class:`Choice` subclasses; their value sets
  come from :mod:`trainer.algos.choices`, :mod:`trainer.data.choices` and the family registry);
- :mod:`~trainer.config.schemas`: the group schemas (model, optim, trainer, eval, data, algo, ...; ``eval``
  composed with the evaluation families' own settings) and :func:`schema_field`;
- :mod:`~trainer.config.roots`: one root schema per entry point, and :data:`SCHEMAS`, the registry of them by name;
- :mod:`~trainer.config.composition`: their registration with Hydra's ConfigStore (``register_schema``) and
  :func:`compose` (a stage's config, as its command line would compose it);
- :mod:`~trainer.config.validation`: ``validate_<recipe>``, run before any model loads (the error they raise,
  :class:`~selectrust.core.errors.ConfigError`, is the foundation's: every layer refuses a setting with it);
- :mod:`~trainer.config.cli_help`: ``python recipes/<x>.py --help``;
- :mod:`~trainer.config.suggest`: "did you mean" for a misspelt key.

The names below are the package's public interface (``from trainer.config import validate_dpo``).
"""

from trainer.config.choices import Aggregation, Backend, Choice, Device, DistillMode, DistillPipelineKind, DistillPromptStyle, DistillSource, DistillStage, DistillTeacher, Dtype, Family, ISCorrection, InitAdapterMode, LoggerKind, MixedPrecision, OnInvalid, Pairing, Reference, Scheduler, SftRows, SftSchedule, StdScaling, TopkSupport, Truncation, Weighting  # noqa: F401
from trainer.config.schemas import AdviceConfig, ChainTrainerConfig, DPOAlgoConfig, DataConfig, DistillAlgoConfig, DistillDataConfig, DistillPipelineConfig, EvalConfig, EvalGroupConfig, GRPOAlgoConfig, GenerationConfig, KnowledgeConfig, LoggerConfig, LoraConfig, ModelConfig, OptimConfig, PromptConfig, SFTAlgoConfig, StageConfig, TrainerConfig, eval_config_schema, generation_schema, schema_field  # noqa: F401
from trainer.config.roots import SCHEMAS, ChainRunConfig, DPORunConfig, DistillRunConfig, EvaluateRunConfig, GRPORunConfig, MergeRunConfig, MineRunConfig, SFTRunConfig  # noqa: F401
from trainer.config.composition import compose, register_schema, register_schemas  # noqa: F401
from trainer.config.validation import check_adapter_dir, check_adapter_weights, check_real_model_settings, check_grpo_geometry, check_known_keys, validate_common, validate_distill, validate_dpo, validate_grpo, validate_knowledge, validate_merge, validate_sft  # noqa: F401
from trainer.config.cli_help import cli_main, exit_with_help_if_asked, help_text, render_help  # noqa: F401
