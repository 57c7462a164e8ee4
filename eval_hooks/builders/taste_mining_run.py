"""Run Taste fork mining from a config file (``python -m eval_hooks mine-forks``).

    python -m eval_hooks mine-forks --config conf/mine_forks.yaml \\
        --trajectories runs.jsonl --out mined/ [mining.seed=1 judges.0.model=...]

The YAML is merged onto :class:`MineForksConfig` (a structured OmegaConf config), so a misspelt key
or a wrong type fails before anything loads; then the trajectory files are validated (errors name
file, line and field), and so are recorded generator replies (``generator_replies``: their item ids and
the steps their quotes cite); only then are the models built (no generator when every candidate has a
recorded reply), and every judge that is an endpoint must answer before the generator runs. Outputs in
``--out``: ``generator_replies.jsonl`` (new generator replies, appended as they arrive: a rerun after a
failure passes it as ``generator_replies``), ``items.jsonl`` (released Taste items, with ``task_id``),
``candidates.jsonl`` (every candidate's fate, generator reply, judge votes and the judges' raw replies,
``<stage>_judge_replies``), ``report.md`` (the funnel table) and ``mining_stats.json`` (written last).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from selectrust.generation.backends import BuildContext, backends_with, get_backend
from selectrust.core.io import write_json_atomic, write_jsonl_atomic, write_text_atomic
from .taste_forks import Funnel, MiningSettings, collect_candidates, funnel_markdown, load_replies, mine_forks
from .trajectories import load_trajectories

_MISSING = object()


@dataclass
class ModelSpec:
    """One generator or judge model: a generation backend that can be built from a model name alone (capability
    ``standalone`` in ``selectrust/generation/backends/spec.py``), with the keys of the backends' settings that apply."""

    name: str = field(default="", metadata={"help": "Label in stats and votes (judges: unique; empty = model)."})
    backend: str = field(default="openai_chat", metadata={"help": "A generation backend that needs no trainer: "
                                                                  "openai_chat (an OpenAI-compatible chat endpoint, "
                                                                  "e.g. vLLM's or a hosted API) | hf (in-process)."})
    model: str = field(default="", metadata={"help": "Served model name (openai_chat) or model path / 'tiny' (hf)."})
    url: str = field(default="http://127.0.0.1:8000", metadata={"help": "openai_chat: base URL (with or without /v1)."})
    api_key_env: Optional[str] = field(default=None, metadata={"help": "openai_chat: env variable holding the API key."})
    timeout_s: float = field(default=300.0, metadata={"help": "openai_chat: per-request timeout."})
    max_retries: int = field(default=3, metadata={"help": "openai_chat: retries on 429/5xx/connection errors."})
    concurrency: int = field(default=4, metadata={"help": "openai_chat: requests in flight."})
    split_n: bool = field(default=False, metadata={"help": "openai_chat: send n calls of n=1 (providers without n)."})
    max_tokens_field: str = field(default="max_tokens", metadata={"help": "openai_chat: max_tokens | max_completion_tokens."})
    extra_body: dict[str, Any] = field(default_factory=dict, metadata={"help": "openai_chat: extra request fields."})
    batch_size: int = field(default=8, metadata={"help": "hf: generation batch size."})

    @property
    def label(self) -> str:
        return self.name or self.model


@dataclass
class MineForksConfig:
    trajectories: list[str] = field(default_factory=list, metadata={"help": "Trajectory files (JSONL/Parquet)."})
    out_dir: str = field(default="", metadata={"help": "Output directory."})
    generator: ModelSpec = field(default_factory=ModelSpec, metadata={"help": "The model that writes candidates."})
    judges: list[ModelSpec] = field(default_factory=list, metadata={"help": "Judge models (not the generator)."})
    generator_replies: Optional[str] = field(default=None, metadata={
        "help": "Reuse recorded generator replies ({item_id, generator_reply} lines, e.g. a previous run's "
                "candidates.jsonl) instead of calling the generator for those candidates."})
    mining: MiningSettings = field(default_factory=MiningSettings)


def load_config(path: str | Path | None, overrides: list[str] | None = None) -> MineForksConfig:
    """Structured config from YAML + dotlist overrides; unknown keys and bad types raise ValueError."""
    import yaml
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        cfg = OmegaConf.structured(MineForksConfig)
        if path is not None:
            cfg = OmegaConf.merge(cfg, OmegaConf.load(path))
        for ov in overrides or []:
            key, eq, value = ov.partition("=")
            if not eq or not key:
                raise ValueError(f"mine-forks: override {ov!r} is not key=value")
            if OmegaConf.select(cfg, key, default=_MISSING) is _MISSING:
                raise ValueError(f"mine-forks: override {ov!r}: no such key {key!r}")
            OmegaConf.update(cfg, key, yaml.safe_load(value), merge=True)
        return OmegaConf.to_object(cfg)
    except OmegaConfBaseException as e:
        raise ValueError(f"mine-forks config {path}: {e}".replace("\n", "; ")) from e


def check_config(cfg: MineForksConfig) -> None:
    cfg.mining.check()
    if not cfg.trajectories:
        raise ValueError("mine-forks: no trajectory files (--trajectories or trajectories: [...])")
    if not cfg.out_dir:
        raise ValueError("mine-forks: out_dir is not set (--out)")
    if not cfg.judges:
        raise ValueError("mine-forks: judges is empty; list at least one judge model")
    accepted = backends_with("standalone")
    for where, spec in [("generator", cfg.generator)] + [(f"judges[{i}]", j) for i, j in enumerate(cfg.judges)]:
        if spec.backend not in accepted:
            raise ValueError(f"mine-forks: {where}.backend={spec.backend!r}; accepted {' | '.join(accepted)}")
        if not spec.model:
            raise ValueError(f"mine-forks: {where}.model is empty")
    labels = [j.label for j in cfg.judges]
    if len(set(labels)) != len(labels):
        raise ValueError(f"mine-forks: judge names must be unique, got {labels}")
    gen = (cfg.generator.backend, cfg.generator.model, cfg.generator.url)
    for i, j in enumerate(cfg.judges):
        if (j.backend, j.model, j.url) == gen:
            raise ValueError(f"mine-forks: judges[{i}] is the generator model {j.model!r}; judges must differ from it")


def build_backend(spec: ModelSpec):
    """The registered backend ``spec.backend`` (unknown: an error listing the known ones), built standalone from
    ``spec.model`` with the spec's keys that are the backend's settings (``url``, ``timeout_s``, ...)."""
    return get_backend(spec.backend).build(spec, BuildContext(model_path=spec.model))


#: New generator replies, appended as they arrive (``{item_id, generator_reply, fate}`` lines): if a judge or the
#: generator fails mid-run, ``generator_replies=<out>/generator_replies.jsonl`` reuses them on the rerun.
REPLIES_FILE = "generator_replies.jsonl"


class _ReplyLog:
    """Appends ``{item_id, generator_reply, fate}`` lines to ``path`` (created on the first reply, flushed each line)."""

    def __init__(self, path: Path):
        self.path, self._f = path, None

    def append(self, record: dict) -> None:
        if self._f is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = open(self.path, "a", encoding="utf-8")
        self._f.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._f.flush()

    def __enter__(self) -> "_ReplyLog":
        return self

    def __exit__(self, *exc) -> None:
        if self._f is not None:
            self._f.close()


def run(cfg: MineForksConfig) -> dict:
    """Validate, mine, write the outputs; returns the stats."""
    check_config(cfg)
    trajectories = load_trajectories(cfg.trajectories)  # DataError before any model is built
    replies = load_replies(cfg.generator_replies, trajectories, cfg.mining) if cfg.generator_replies else {}
    n_live = sum(c["fate"] is None for c in collect_candidates(trajectories, cfg.mining, Funnel()))
    judges = [(j.label, build_backend(j)) for j in cfg.judges]
    for _, backend in judges:  # a judge that is down fails the run now, not after the generator's work
        if hasattr(backend, "check_reachable"):
            backend.check_reachable()
    generator = build_backend(cfg.generator) if len(replies) < n_live else None
    out = Path(cfg.out_dir)
    with _ReplyLog(out / REPLIES_FILE) as log:
        items, stats, cands = mine_forks(trajectories, generator, judges, cfg.mining, replies=replies,
                                         on_reply=log.append)
    stats["generator"] = cfg.generator.label
    stats["trajectory_files"] = list(cfg.trajectories)
    stats["n_trajectories"] = len(trajectories)
    write_jsonl_atomic(out / "items.jsonl", items)
    write_jsonl_atomic(out / "candidates.jsonl", cands)
    write_text_atomic(out / "report.md", "# Taste fork mining\n\n"
                      f"{len(trajectories)} trajectories; generator `{stats['generator']}`; judges "
                      + ", ".join(f"`{n}`" for n in stats["judges"]) + ".\n\n" + funnel_markdown(stats))
    write_json_atomic(out / "mining_stats.json", stats)
    return stats
