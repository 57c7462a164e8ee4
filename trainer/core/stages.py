"""Chained training stages: named trainer configs run one after another, each from the previous one's weights.

A chain (``recipes/chain.py``, a recipe file under ``conf/recipe/`` naming ``stages``) runs stage
``<name>`` as an ordinary trainer run in ``<run_dir>/stages/<name>/``. A stage starts from another
stage's ``final/`` (``init_from``: the previous stage by default):

- an adapter there becomes ``model.init_adapter`` (with ``model.init_adapter_mode`` = the stage's
  ``init_mode``, merge or continue) on top of the model path that stage itself started from;
- a full model there (a stage trained without LoRA) becomes ``model.path``.

Re-running the same command skips a stage whose ``run_complete.json`` exists (after checking that its
saved config equals the one composed now), and resumes an interrupted stage from its newest complete
checkpoint (``trainer.resume=auto``). A stage records what it started from (``stage_start.json``: the
content hash of the previous stage's ``final/`` or of the base model, ``trainer/core/stage_start.py``); a
stage whose start changed since (an earlier stage was retrained) is not complete: it is refused naming
both hashes, or retrained with ``rerun_stale=True`` (``trainer.rerun_stale_stages=true``; the stage runs
with ``trainer.overwrite=true``, which moves the old one aside). A stage whose ``run_complete.json``
exists but whose ``final/`` lost its weights is resumed from its newest complete checkpoint (which
rewrites ``final/``), or retrained when it has none. Every rank of a multi-process launch runs the
runner and takes the same decisions from the same files; only the training run itself (its main
process) moves or writes stage files. A stage that stops early (preemption, ``trainer.stop_at_step``)
ends the chain; running the command again continues it. ``<run_dir>/chain.json`` records each stage.

The runner does not know the recipes: the caller passes ``compose(config_name, overrides)`` and one
``run(cfg)`` callable per trainer script (``recipes/chain.py`` passes ``recipes/<script>.py``'s).
"""

from __future__ import annotations

import contextlib
import json
import re
import time
from pathlib import Path
from typing import Any, Callable

from trainer.config import ConfigError

SCRIPTS = ("sft", "dpo", "grpo", "distill")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


def stage_sources(stages) -> dict[str, str | None]:
    """``{stage: the stage it starts from, or None}``; raises ConfigError on a bad chain (before any model loads)."""
    if not stages:
        raise ConfigError("stages: the chain names no stage (pick a chain recipe, e.g. recipe=box2_tiny)")
    out: dict[str, str | None] = {}
    previous = None
    for name, st in stages.items():
        where = f"stages.{name}"
        if not _NAME.match(name):
            raise ConfigError(f"{where}: a stage name must be letters, digits, '_', '-' or '.' (it names a directory)")
        if st.script not in SCRIPTS:
            raise ConfigError(f"{where}.script={st.script!r} is not one of {', '.join(SCRIPTS)}")
        source = previous if st.init_from == "previous" else st.init_from
        if source is not None and source not in out:
            raise ConfigError(f"{where}.init_from={st.init_from!r}: no earlier stage of that name (earlier: {list(out)})")
        out[name] = source
        previous = name
    return out


def validate_chain(cfg, compose: Callable[[str, list[str]], Any]) -> dict[str, str | None]:
    """Check the chain and compose + validate every stage's own config (without its start weights, which
    do not exist yet), so a misspelt override in the last stage fails before the first stage trains."""
    from omegaconf import OmegaConf

    from trainer.config import validate_distill, validate_dpo, validate_grpo, validate_sft

    validators = {"sft": validate_sft, "dpo": validate_dpo, "grpo": validate_grpo, "distill": validate_distill}
    sources = stage_sources(cfg.stages)
    for name, st in cfg.stages.items():
        try:
            stage_cfg = compose(st.script, [*st.overrides, *cfg.common, *st.extra])
            validators[st.script](stage_cfg)
            OmegaConf.to_container(stage_cfg, resolve=True, throw_on_missing=True)  # e.g. an unset data.train_path
        except Exception as e:  # noqa: BLE001 - re-raised naming the stage
            raise ConfigError(f"stages.{name} ({st.script}.py with {[*st.overrides, *cfg.common, *st.extra]}): "
                              f"{type(e).__name__}: {e}") from e
    return sources


def _quote(value: Any) -> str:
    """A Hydra override value for a path (quoted, so any character but a quote is literal)."""
    text = str(value)
    if "'" in text:
        raise ConfigError(f"path {text!r}: a quote character cannot be passed through a Hydra override")
    return f"'{text}'"


class StageRunner:
    """Runs stages in ``<root>/stages/<name>/`` (see the module docstring)."""

    def __init__(self, root, *, seed: int, compose: Callable[[str, list[str]], Any],
                 runners: dict[str, Callable[[Any], Any]], common: list[str] | tuple[str, ...] = (),
                 log: Callable[[str], None] = lambda msg: print(f"[chain] {msg}", flush=True),
                 rerun_stale: bool = False):
        self.root = Path(root).expanduser().resolve()
        self.seed, self.compose, self.runners, self.common, self.log = seed, compose, runners, list(common), log
        self.rerun_stale = rerun_stale
        self.records: dict[str, dict] = {}

    def stage_dir(self, name: str) -> Path:
        return self.root / "stages" / name

    def start_overrides(self, source: str | None, mode: str) -> list[str]:
        """Overrides that make a stage start from ``source``'s ``final/`` (none for ``source=None``)."""
        if source is None:
            return []
        final = self.stage_dir(source) / "final"
        if (final / "adapter_config.json").is_file():
            from omegaconf import OmegaConf

            start = OmegaConf.load(self.stage_dir(source) / "config.yaml").model
            if start.init_adapter and start.init_adapter_mode == "merge":
                raise ConfigError(
                    f"stage {source!r} trained a fresh adapter on a merged model ({start.init_adapter} folded into "
                    f"{start.path}); a stage starting from it needs both merged: write that model with "
                    f"python recipes/merge.py and give it as model.path, or run stage {source!r} with init_mode=continue")
            return [f"model.path={_quote(start.path)}", f"model.init_adapter={_quote(final)}",
                    f"model.init_adapter_mode={mode}"]
        if (final / "config.json").is_file():
            return [f"model.path={_quote(final)}"]
        raise FileNotFoundError(f"stage {source!r} has no final/ adapter or model in {final}: it did not complete")

    def compose_stage(self, name: str, stage, source: str | None, extra: tuple[str, ...] = ()):
        overrides = [*stage.overrides, *self.common, *stage.extra, f"seed={self.seed}",
                     f"trainer.run_dir={_quote(self.stage_dir(name))}", *self.start_overrides(source, stage.init_mode),
                     *extra]
        return self.compose(stage.script, overrides)

    def run(self, name: str, stage, source: str | None) -> Path | None:
        """Train (or skip, or resume) one stage; returns its ``final/`` directory, or None when it stopped early."""
        from omegaconf import OmegaConf

        from trainer.core.checkpoint import resumable
        from trainer.core.run_dir import config_differences
        from trainer.core.stage_start import read_start, write_start

        run_dir = self.stage_dir(name)
        cfg = self.compose_stage(name, stage, source)
        done = run_dir / "run_complete.json"
        start, retrain = self._check_start(name, run_dir, cfg)
        retrain = retrain or (done.exists() and self._final_lost(name, run_dir))
        if retrain == "retrain":  # the trainer's main process moves the old stage to <name>.old-<n>
            cfg = self.compose_stage(name, stage, source, extra=("trainer.overwrite=true",))
        if done.exists() and not retrain:
            saved = OmegaConf.to_container(OmegaConf.load(run_dir / "config.yaml"), resolve=True)
            diffs = config_differences(saved, OmegaConf.to_container(cfg, resolve=True))
            if diffs:
                raise ConfigError(f"stage {name!r} finished in {run_dir} with another config ({len(diffs)} differing "
                                  f"keys):\n  " + "\n  ".join(diffs) + f"\nUse a new trainer.run_dir, or delete {run_dir}.")
            self.log(f"{name}: already complete ({done}), skipped")
            self.records[name] = {"status": "skipped", **json.loads(done.read_text())}
            return run_dir / "final"
        # a lone .tmp-step_N (a save cut short) is nothing to resume
        resuming = retrain != "retrain" and resumable(run_dir)
        self.log(f"{name}: {'resuming' if resuming else 'training'} ({stage.script}.py, from "
                 f"{source + '/final' if source else 'model.path'}) in {run_dir}")
        if read_start(run_dir) is None and not retrain and _main_process():
            write_start(run_dir, start)
        _reset_accelerate()
        t0 = time.time()
        result = self.runners[stage.script](cfg)
        if _main_process() and (retrain == "retrain" or read_start(run_dir) is None):  # overwrite moved the old one
            write_start(run_dir, start)
        if result is None or result.stopped_early:
            self.log(f"{name}: stopped early at step {getattr(result, 'step', '?')}; run the same command to continue")
            self.records[name] = {"status": "stopped", "step": getattr(result, "step", None)}
            return None
        self.records[name] = {"status": "resumed" if resuming else "trained", "seconds": round(time.time() - t0, 1),
                              **json.loads(done.read_text())}
        return run_dir / "final"

    def _check_start(self, name: str, run_dir: Path, cfg) -> tuple[dict, str | None]:
        """(the stage's start now (``stage_start.start_identity``), ``"retrain"`` or None). A recorded start that
        differs makes the stage stale: refused naming both hashes, or (``rerun_stale``) retrained."""
        from .stage_start import read_start, start_differences, start_identity

        now = start_identity(cfg)
        recorded = read_start(run_dir)
        diffs = start_differences(recorded, now) if recorded is not None else []
        if not diffs:
            return now, None
        if not self.rerun_stale:
            raise ConfigError(
                f"stage {name!r} in {run_dir} was trained from other weights than it would start from now (an "
                f"earlier stage was retrained since), so it is not complete:\n  " + "\n  ".join(diffs)
                + f"\nPass trainer.rerun_stale_stages=true to retrain it (its directory is moved aside to "
                  f"{run_dir.name}.old-<n>), or use a new trainer.run_dir.")
        self.log(f"{name}: its start changed since it trained (" + "; ".join(diffs) + f"): retraining "
                 f"(trainer.rerun_stale_stages=true; the old stage is moved to {run_dir.name}.old-<n>)")
        return now, "retrain"

    def _final_lost(self, name: str, run_dir: Path) -> str | None:
        """``run_complete.json`` exists but ``final/`` lost its weights: the stage is not finished. ``"resume"``
        from its newest complete checkpoint (the loop writes ``final/`` and ``run_complete.json`` again), or
        ``"retrain"`` when it has none; None when ``final/`` is complete."""
        from .checkpoint import complete_checkpoints
        from .stage_start import final_is_complete

        final = run_dir / "final"
        if final_is_complete(final):
            return None
        ckpts = complete_checkpoints(run_dir / "checkpoints")
        if ckpts:
            self.log(f"{name}: run_complete.json exists but {final} has no weights: not finished; resuming from "
                     f"{ckpts[-1]} to write final/ again")
            return "resume"
        self.log(f"{name}: run_complete.json exists but {final} has no weights and no complete checkpoint is "
                 f"left: not finished; retraining (the old stage is moved to {run_dir.name}.old-<n>)")
        return "retrain"

    def run_all(self, stages) -> dict[str, dict]:
        """Run every stage in order (stopping at one that stops early); writes ``<root>/chain.json``."""
        from eval_hooks.io import write_json_atomic

        sources = stage_sources(stages)
        for name, stage in stages.items():
            final = self.run(name, stage, sources[name])
            if final is None:
                break
        write_json_atomic(self.root / "chain.json", {"stages": self.records})
        return self.records


@contextlib.contextmanager
def chain_lock(root, prefix: str = "[chain]"):
    """Hold ``<root>/.lock`` (``trainer.run_dir.RunLock``) for the life of a chain and write ``<root>/chain.log``
    only while holding it: a second chain into the same directory is refused (naming the holder) before it
    writes anything. Yields the runner's ``log``: each message printed and appended to ``chain.log``, which also
    receives the process's logging records. (Hydra's own job log file is off for the chain: conf/chain.yaml.)"""
    import logging

    from .run_dir import RunLock

    if not _main_process():  # the other ranks of a launch only print
        yield lambda msg: print(f"{prefix} {msg}", flush=True)
        return
    root = Path(root).expanduser().resolve()
    root.mkdir(parents=True, exist_ok=True)
    lock = RunLock(root).acquire()
    handler = logging.FileHandler(root / "chain.log")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    logging.getLogger().addHandler(handler)

    def log(msg: str) -> None:
        print(f"{prefix} {msg}", flush=True)
        handler.handle(logging.LogRecord("chain", logging.INFO, __file__, 0, msg, None, None))

    try:
        yield log
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()
        lock.release()


def exit_stopped(message: str) -> None:
    """A stage stopped early (preempted, ``trainer.stop_at_step``) after saving its checkpoint: print ``message``
    and exit 0, the rule of every entry point (a requeue wrapper reruns a command that exits 0 without
    ``run_complete.json``; 1 would mean a failure). Ctrl-C exits 130 from the training loop itself."""
    print(message, flush=True)
    raise SystemExit(0)


def _main_process() -> bool:
    """The main process of a launch (``RANK`` as set by accelerate/torchrun; a plain run has none)."""
    import os

    return os.environ.get("RANK", "0") == "0"


def _reset_accelerate() -> None:
    """Forget the previous stage's accelerate state (mixed precision, device) before building the next one."""
    from accelerate.state import AcceleratorState, GradientState, PartialState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    PartialState._reset_state()
