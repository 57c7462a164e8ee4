"""Run setup shared by every recipe: accelerator, seeds, the run directory and its records.

The run directory is ``trainer.run_dir`` exactly (no timestamps), so every rank of a multi-process
launch agrees on it. It holds ``config.yaml`` (resolved), ``meta.json`` (git commit, package versions,
command line, world size), ``metrics.jsonl`` and, later, ``checkpoints/`` and ``eval/``.
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from selectrust.model import cpu_supports_bf16, resolve_mixed_precision  # noqa: F401  (also the trainer's)
from importlib.metadata import PackageNotFoundError, version
from datetime import timedelta


PACKAGES = ("torch", "transformers", "trl", "peft", "accelerate", "datasets", "hydra-core", "deepspeed", "wandb")


def seed_everything(seed: int) -> None:
    """Python, numpy and torch (CPU and every GPU) RNGs: ``transformers.set_seed``."""
    from transformers import set_seed  # deferred: imports torch, transformers

    set_seed(seed)


def git_commit(root: Path | None = None) -> str | None:
    root = root or Path(__file__).resolve().parents[2]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True, timeout=5)
        return out.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "") if out.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired):
        return None


def package_versions() -> dict[str, str | None]:
    out = {"python": platform.python_version()}
    for p in PACKAGES:
        try:
            out[p] = version(p)
        except PackageNotFoundError:
            out[p] = None
    return out


def _jsonable(v: Any) -> Any:
    if hasattr(v, "item") and callable(v.item):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def read_jsonl_records(path: Path) -> list[tuple[str, dict]]:
    """``(line, record)`` of every line of a JSONL log. A torn final line (no newline, not JSON: a write cut
    short by a full disk or a kill) is dropped with a warning; any other unreadable line is an error
    naming the file and line."""
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    lines = text.split("\n")
    out = []
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
            if not isinstance(rec, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            if i == len(lines):  # the last line has no newline: torn
                print(f"[selectrust] warning: {path}:{i}: dropping a torn final line ({len(line)} characters "
                      f"not ending in a newline)", flush=True)
                continue
            raise ValueError(f"{path}:{i}: unreadable metrics line ({e}); fix or remove that line") from None
        out.append((line, rec))
    return out


class MetricsLogger:
    """Appends one JSON object per logging step to ``<run_dir>/metrics.jsonl`` (main process only);
    mirrors to wandb when ``logger.kind == 'wandb'`` (offline mode without credentials)."""

    def __init__(self, run_dir: Path, *, is_main: bool, kind: str = "jsonl", project: str = "selectrust",
                 name: str | None = None, config: dict | None = None):
        self.path = Path(run_dir) / "metrics.jsonl"
        self.is_main = is_main
        self._wandb = None
        if is_main and kind == "wandb":
            import wandb

            if not os.environ.get("WANDB_API_KEY") and os.environ.get("WANDB_MODE") is None:
                os.environ["WANDB_MODE"] = "offline"
            self._wandb = wandb.init(project=project, name=name or Path(run_dir).name, dir=str(run_dir),
                                     config=config, resume="allow")

    def log(self, step: int, metrics: dict[str, Any]) -> None:
        if not self.is_main:
            return
        record = {"step": step, "time": round(time.time(), 3)}
        record.update({k: _jsonable(v) for k, v in metrics.items()})
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")
        if self._wandb is not None:
            self._wandb.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=step)

    def truncate_after(self, step: int) -> None:
        """On resume, drop lines logged after the checkpoint's step (they will be logged again)."""
        if not self.is_main or not self.path.exists():
            return
        keep = [l for l, rec in read_jsonl_records(self.path) if rec.get("step", 0) <= step]
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("".join(l + "\n" for l in keep))
        os.replace(tmp, self.path)

    def close(self) -> None:
        if self._wandb is not None:
            self._wandb.finish()


@dataclass
class RunContext:
    cfg: Any
    accelerator: Any
    run_dir: Path
    logger: MetricsLogger
    recipe: str
    started: float = field(default_factory=time.time)
    lock: Any = None  # trainer.runtime.run_dir.RunLock held by the run dir's owner (nodes.py) for the life of the run
    resume_from: Path | None = None  # the checkpoint this run continues (resolved before any model loads)
    nodes: Any = None  # trainer.runtime.nodes.Nodes: this rank's node, how many, whether each has its own run_dir

    def release(self) -> None:
        if self.lock is not None:
            self.lock.release()

    @property
    def is_main(self) -> bool:
        return self.accelerator.is_main_process

    @property
    def device(self):
        return self.accelerator.device

    def barrier(self) -> None:
        self.accelerator.wait_for_everyone()


def make_accelerator(trainer_cfg, grad_accum: int = 1, *, micro_batch: int | None = None,
                     max_grad_norm: float | None = None):
    """The run's ``Accelerator``. Under DeepSpeed the config's "auto" values are filled from the recipe:
    gradient accumulation (``grad_accum``), micro-batch size per rank (``micro_batch``; the recipes
    prepare no dataloader for accelerate to read it from) and clipping (``max_grad_norm``; 0 = off).
    Without CUDA (DeepSpeed on CPU) the process group must be gloo, or accelerate counts one process
    while DeepSpeed counts all of them. The process group's timeout is ``trainer.dist_timeout_s``."""
    from accelerate import Accelerator  # deferred: imports torch, accelerate
    from accelerate.utils import InitProcessGroupKwargs  # deferred: imports torch, accelerate

    from .distributed import uses_deepspeed  # deferred: imports torch

    kwargs: dict[str, Any] = {"mixed_precision": resolve_mixed_precision(trainer_cfg.mixed_precision,
                                                                         cpu=trainer_cfg.device == "cpu")}
    # how long a rank waits in a collective for the others (a hung or vanished node): trainer.dist_timeout_s
    group = {"timeout": timedelta(seconds=getattr(trainer_cfg, "dist_timeout_s", 1800))}
    if trainer_cfg.device == "cpu":
        kwargs["cpu"] = True
    elif uses_deepspeed():
        import torch

        if not torch.cuda.is_available():
            group["backend"] = "gloo"
        kwargs["gradient_accumulation_steps"] = grad_accum
    kwargs["kwargs_handlers"] = [InitProcessGroupKwargs(**group)]
    acc = Accelerator(**kwargs)
    if uses_deepspeed(acc):
        ds = acc.state.deepspeed_plugin.deepspeed_config
        fills = {"gradient_accumulation_steps": grad_accum, "train_micro_batch_size_per_gpu": micro_batch,
                 "gradient_clipping": None if max_grad_norm is None else max(0.0, float(max_grad_norm))}
        for key, value in fills.items():
            if value is not None and ds.get(key, "auto") == "auto":
                ds[key] = value
    return acc


def setup_run(cfg, recipe: str) -> RunContext:
    """Create the accelerator, lock the run directory (one writer), refuse a fresh start over a previous
    run (``trainer.overwrite`` moves it aside) and a resume with a changed config or changed data, record
    meta and data hashes, seed, open the logger. ``config.yaml`` is written later, by the training loop,
    so a start that fails before training leaves no config that a corrected command would clash with."""
    from trainer.runtime.run_dir import open_run_dir  # deferred: imports torch, numpy

    accelerator = make_accelerator(cfg.trainer, grad_accum=cfg.optim.grad_accum, micro_batch=cfg.optim.batch_size,
                                   max_grad_norm=cfg.optim.max_grad_norm)
    run_dir = Path(cfg.trainer.run_dir).expanduser().resolve()
    lock, resume_from, nodes = open_run_dir(cfg, accelerator, run_dir)
    ctx = RunContext(cfg=cfg, accelerator=accelerator, run_dir=run_dir, logger=None, recipe=recipe,  # type: ignore[arg-type]
                     lock=lock, resume_from=resume_from, nodes=nodes)
    if accelerator.is_main_process:
        meta = {
            "recipe": recipe,
            "git_commit": git_commit(),
            "packages": package_versions(),
            "command": [sys.executable, *sys.argv],
            "cwd": os.getcwd(),
            "world_size": accelerator.num_processes,
            "distributed_type": str(accelerator.distributed_type),
            "nodes": nodes.count,
            "run_dir_layout": "node_local" if nodes.node_local else "shared",
            "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (run_dir / "meta.json").write_text(json.dumps(meta, indent=2) + "\n")
    accelerator.wait_for_everyone()
    seed_everything(cfg.seed)
    ctx.logger = _open_logger(cfg, run_dir, accelerator.is_main_process)
    return ctx


def _open_logger(cfg, run_dir: Path, is_main: bool) -> MetricsLogger:
    return MetricsLogger(run_dir, is_main=is_main, kind=cfg.logger.kind, project=cfg.logger.project,
                         name=cfg.logger.name, config=asdict(cfg))  # the typed settings as plain values


def write_config(ctx: RunContext) -> None:
    """Write the resolved config when training is about to start (after the resume checks, so a refused
    resume leaves the old one, and after every model/optimizer build, so a failed start writes none)."""
    from omegaconf import OmegaConf  # deferred: imports omegaconf

    if ctx.is_main:
        tmp = ctx.run_dir / "config.yaml.tmp"
        # the typed settings (resolved once, at the entry point) as YAML: the composed config's, byte for byte
        tmp.write_text(OmegaConf.to_yaml(OmegaConf.create(asdict(ctx.cfg))))
        os.replace(tmp, ctx.run_dir / "config.yaml")


def finish_run(ctx: RunContext, step: int, final_metrics: dict[str, Any], *, stopped_early: bool) -> None:
    """Mark the run complete (``run_complete.json``, read by the sweep launcher); not when the loop
    stopped early (``LoopResult.stopped_early``: ``trainer.stop_at_step`` before ``max_steps``,
    preemption): the run resumes later."""
    if stopped_early:
        if ctx.is_main:
            print(f"[selectrust] stopped at step {step} before trainer.max_steps={ctx.cfg.trainer.max_steps}: "
                  f"no run_complete.json; run the same command to continue", flush=True)
    elif ctx.is_main:
        record = {"step": step, "wall_seconds": round(time.time() - ctx.started, 2),
                  "final_metrics": {k: _jsonable(v) for k, v in final_metrics.items()}}
        tmp = ctx.run_dir / "run_complete.json.tmp"
        tmp.write_text(json.dumps(record, indent=2) + "\n")
        os.replace(tmp, ctx.run_dir / "run_complete.json")
    ctx.logger.close()
