"""A training stage: trained, skipped when finished, resumed when interrupted, refused or retrained when its start,
config or provenance changed (:class:`TrainingStages`, a part of :class:`~recipes.stages.runner.StageRunner`)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from recipes.stages.process import main_process, reset_accelerate
from selectrust.core.errors import ConfigError
from trainer.runtime.relocation import portable_pair
from trainer.runtime.stage import Stage


class TrainingStages:
    """The training stages of :class:`~recipes.stages.runner.StageRunner` (uses its ``stage_dir``, ``compose_stage``,
    ``input_identity``, ``_provenance_changed``, ``runners``, ``log``, ``records`` and ``made_under``)."""

    def train(self, stage: Stage, cfg) -> Path | None:
        """Train (or skip, or resume) one training stage; returns its ``final/`` directory, or None when it
        stopped early."""
        from trainer.runtime.checkpoint import resumable  # deferred: imports numpy
        from recipes.stages.record import (  # deferred: import cycle with recipes.stages.record
            recorded_provenance, write_training_record)
        from recipes.stages.start import read_start, write_start  # deferred: import cycle with recipes.stages.start

        name, run_dir = stage.name, self.stage_dir(stage.name)
        done = run_dir / "run_complete.json"
        now = self.provenance(cfg) if self.provenance is not None else None
        start, retrain = self._check_start(stage, cfg)
        retrain = retrain or (done.exists() and self._final_lost(name, run_dir))
        retrain = retrain or self._changed_since(stage, cfg, done, now)
        if retrain == "retrain":  # the trainer's main process moves the old stage to <name>.old-<n>
            cfg = self.compose_stage(stage, extra=("trainer.overwrite=true",))
        if done.exists() and not retrain:
            self.log(f"{name}: already complete ({done}), skipped")
            self.records[name] = {"status": "skipped", **json.loads(done.read_text())}
            self.made_under[name] = recorded_provenance(run_dir)
            return run_dir / "final"
        # a lone .tmp-step_N (a save cut short) is nothing to resume
        resuming = retrain != "retrain" and resumable(run_dir)
        self.log(f"{name}: {'resuming' if resuming else 'training'} ({stage.recipe}.py, from "
                 f"{stage.start + '/final' if stage.start else 'model.path'}) in {run_dir}")
        if read_start(run_dir) is None and not retrain and main_process():
            write_start(run_dir, start)
        reset_accelerate()
        t0 = time.time()
        result = self.runners[stage.recipe](cfg)
        if main_process() and (retrain == "retrain" or read_start(run_dir) is None):  # overwrite moved the old one
            write_start(run_dir, start)
        if result is None or result.stopped_early:
            self.records[name] = {"status": "stopped", "step": getattr(result, "step", None)}
            return None
        if now is not None and main_process():
            write_training_record(run_dir, stage.recipe, now)
        self.made_under[name] = now
        self.records[name] = {"status": "resumed" if resuming else "trained", "seconds": round(time.time() - t0, 1),
                              **json.loads(done.read_text())}
        self._late_stop = getattr(result, "late_stop", None)
        return run_dir / "final"

    def _changed_since(self, stage: Stage, cfg, done: Path, now: dict | None) -> str | None:
        """``"retrain"`` for a training stage that finished (or has a checkpoint to resume) under another config, or
        finished under another provenance (``now``; :meth:`_provenance_changed`), with ``rerun_changed`` (said in
        one line); without it a finished one is refused naming the keys (an interrupted one is left to the
        trainer's resume check). None when the stage may be skipped, resumed or trained as it is."""
        from omegaconf import OmegaConf  # deferred: imports omegaconf

        from trainer.runtime.checkpoint import resumable  # deferred: imports numpy
        from trainer.runtime.run_dir import config_differences  # deferred: imports torch, numpy
        from recipes.stages.record import recorded_provenance  # deferred: import cycle with recipes.stages.record

        name, run_dir = stage.name, self.stage_dir(stage.name)
        finished, saved = done.exists(), run_dir / "config.yaml"
        if not saved.is_file() or not (finished or resumable(run_dir)):
            return None
        both = [OmegaConf.to_container(c, resolve=True) for c in (OmegaConf.load(saved), cfg)]
        diffs = config_differences(*portable_pair(*both, "trainer.run_dir"))
        why = diffs and f"its config changed since it {'finished' if finished else 'started'} ({'; '.join(diffs)})"
        if not diffs and finished:
            changed = self._provenance_changed(name, recorded_provenance(run_dir), now)
            why = changed and f"its provenance differs from this run's ({'; '.join(changed)})"
        if not why or not (finished or self.rerun_changed):
            return None
        if not self.rerun_changed:
            if diffs:
                raise ConfigError(f"stage {name!r} finished in {run_dir} with another config ({len(diffs)} differing "
                                  f"keys):\n  " + "\n  ".join(diffs) + f"\nUse a new trainer.run_dir, or delete {run_dir}.")
            raise ConfigError(f"stage {name!r} in {run_dir}: {why}. Use a new trainer.run_dir, or delete {run_dir}.")
        self.log(f"{name}: {why}: retraining (the old stage is moved to {run_dir.name}.old-<n>)")
        return "retrain"

    def _check_start(self, stage: Stage, cfg) -> tuple[dict, str | None]:
        """(the stage's start now (``stage_start.start_identity`` and its inputs' identity), ``"retrain"`` or None).
        A recorded start that differs makes the stage stale: refused naming both hashes, or (``rerun_stale``)
        retrained."""
        from recipes.stages.start import (  # deferred: import cycle with recipes.stages.start
            read_start, start_differences, start_identity)

        name, run_dir = stage.name, self.stage_dir(stage.name)
        now = {**self.input_identity(stage), **start_identity(cfg)}
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
        from trainer.runtime.checkpoint import checkpoints_dir, complete_checkpoints  # deferred: imports numpy
        from recipes.stages.start import final_is_complete  # deferred: import cycle with recipes.stages.start

        final = run_dir / "final"
        if final_is_complete(final):
            return None
        ckpts = complete_checkpoints(checkpoints_dir(run_dir))
        if ckpts:
            self.log(f"{name}: run_complete.json exists but {final} has no weights: not finished; resuming from "
                     f"{ckpts[-1]} to write final/ again")
            return "resume"
        self.log(f"{name}: run_complete.json exists but {final} has no weights and no complete checkpoint is "
                 f"left: not finished; retraining (the old stage is moved to {run_dir.name}.old-<n>)")
        return "retrain"
