"""Root schemas, one per entry point (``recipes/<x>.py`` composes ``conf/<x>.yaml`` onto one): the
groups of :mod:`trainer.config.schemas` each recipe reads, plus its own top-level keys; and :data:`SCHEMAS`, the
registry of them by the name ``conf/<x>.yaml``'s defaults list gives (Hydra's ConfigStore is told of them by
:mod:`trainer.config.config_store`)."""

from __future__ import annotations

from dataclasses import dataclass, field, is_dataclass
from typing import Optional

from omegaconf import MISSING

from selectrust.core.plugins import Registry

from trainer.config.schemas import (AdviceConfig, ChainTrainerConfig, DataConfig, DistillAlgoConfig,
                                    DistillDataConfig, DistillPipelineConfig, DPOAlgoConfig, EvalConfig,
                                    GenerationConfig, GRPOAlgoConfig, KnowledgeConfig, LoggerConfig, ModelConfig,
                                    OptimConfig, PromptConfig, SFTAlgoConfig, StageConfig, TrainerConfig)
from trainer.config.schemas import schema_field as _f


@dataclass
class _RunBase:
    seed: int = _f(0, "Global seed (data order, init of adapters, sampling).")
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    data: DataConfig = field(default_factory=DataConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)


@dataclass
class DPORunConfig(_RunBase):
    algo: DPOAlgoConfig = field(default_factory=DPOAlgoConfig)


@dataclass
class SFTRunConfig(_RunBase):
    algo: SFTAlgoConfig = field(default_factory=SFTAlgoConfig)


@dataclass
class GRPORunConfig(_RunBase):
    algo: GRPOAlgoConfig = field(default_factory=GRPOAlgoConfig)


@dataclass
class DistillRunConfig(_RunBase):
    algo: DistillAlgoConfig = field(default_factory=DistillAlgoConfig)
    data: DistillDataConfig = field(default_factory=DistillDataConfig)  # type: ignore[assignment]
    pipeline: DistillPipelineConfig = field(default_factory=DistillPipelineConfig)
    advice: AdviceConfig = field(default_factory=AdviceConfig)


@dataclass
class EvaluateRunConfig:
    seed: int = _f(0, "Seed (only matters for sampled generation).")
    out_dir: str = _f("runs/evaluate", "Where metrics.json, item_scores.jsonl and report.md go.")
    adapter_path: Optional[str] = _f(None, "Optional LoRA adapter directory to apply to model.path.")
    model: ModelConfig = field(default_factory=ModelConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    knowledge: KnowledgeConfig = field(default_factory=KnowledgeConfig)


@dataclass
class MineRunConfig:
    seed: int = _f(0, "Seed.")
    items_path: str = _f(MISSING, "MIST-format training items: JSONL/Parquet file, save_to_disk directory, "
                                  "'hf:org/name[:config][:split]' or a registered data source.")
    out_dir: str = _f("runs/mine_pairs", "Writes pairs.jsonl (quartets) and mining_stats.json here.")
    max_new_tokens: Optional[int] = _f(None, "Generation budget for mining; None = the items' answer format's "
                                       "(eval_hooks.parsers.answer_budget: short_text 32, reasoning formats 512; the "
                                       "tiny model 4, selectrust.model.load.TOY_ANSWER_BUDGET). Completions cut off by it are dropped (mining_stats.json: cut_off).")
    use_fallback: bool = _f(True, "Elicit r+ with a private diagnostic note when the clean answer is wrong.")
    fallback_note: str = _f("Private note for you only: the correct answer is {gold}. Answer the question normally and do not mention this note.",
                            "Template of the elicitation note ({gold} is filled in). Never part of the DPO prompt.")
    leak_patterns: list[str] = _f(["note", "hint", "answer key", "i was told", "private"],
                                  "Case-insensitive substrings that betray the note; fallbacks containing one are dropped.")
    model: ModelConfig = field(default_factory=ModelConfig)
    generation: GenerationConfig = field(default_factory=GenerationConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    knowledge: KnowledgeConfig = field(default_factory=KnowledgeConfig)


@dataclass
class ChainRunConfig:
    seed: int = _f(0, "Seed given to every stage.")
    trainer: ChainTrainerConfig = field(default_factory=ChainTrainerConfig)
    common: list[str] = _f([], "Overrides applied to every stage after its own, e.g. model.path=<dir> or eval=none.")
    stages: dict[str, StageConfig] = _f({}, "Stages in run order (a recipe file under conf/recipe/ names them).")


@dataclass
class MergeRunConfig:
    adapters: list[str] = _f(MISSING, "PEFT adapter directories (safetensors) merged into model.path, in this order.")
    out_dir: str = _f(MISSING, "Where the merged model (safetensors, config, tokenizer) is written; must not exist.")
    model: ModelConfig = field(default_factory=ModelConfig)


def _accept(name: str, node: object) -> type:
    """A root schema is a dataclass type."""
    if not (isinstance(node, type) and is_dataclass(node)):
        raise TypeError(f"schema {name!r}: a root schema is a dataclass type, got {node!r}")
    return node


#: The root schemas by name (``conf/<x>.yaml``'s defaults list names one, ``<x>_schema``): these, those a package
#: registers in code (``trainer.config.register_schema``: the demo's), or an installed package's entry point in group
#: ``selectrust.schemas`` naming a dataclass.
SCHEMAS: Registry[type] = Registry("schema", "selectrust.schemas", {
    "chain_schema": ChainRunConfig,
    "merge_schema": MergeRunConfig,
    "dpo_schema": DPORunConfig,
    "sft_schema": SFTRunConfig,
    "grpo_schema": GRPORunConfig,
    "distill_schema": DistillRunConfig,
    "evaluate_schema": EvaluateRunConfig,
    "mine_schema": MineRunConfig,
}, accept=_accept, error=KeyError)
