"""The stage runner: named stages run one after another in this process, each in its own directory under one root.

It runs the chains (``recipes/chain.py``), the distillation pipelines (``recipes/pipelines/taste_distill.py``,
``opsd_pipeline.py``) and both demos (``demos/``). A stage (:class:`Stage`) is a name, a recipe, the Hydra
overrides of that recipe's config and its inputs. The runner does not know the recipes: the entry point hands
down ``compose(config_name, overrides)`` and a ``{name: run(cfg)}`` mapping (``recipes.stage_recipes.runners``),
so a stage names its recipe and nothing below ``recipes/`` imports it. A step that is not a recipe (building a
data set, converting a model) is a stage with ``call`` instead: a function of the stage's directory, and, when the
step declares ``inputs`` (``{name: "<earlier stage>[/<path>]"}``), of their paths too (``call(dir, {name: path})``),
so a step reads another stage's output where the runner says it is, never by a path of its own.

Every recipe stage gets ``seed`` and its directory: ``trainer.run_dir`` for a training recipe (a config with a
``trainer`` section), ``out_dir`` for any other (evaluation, pair mining). ``inputs`` set config keys to another
stage's output (``{"data.train_path": "mine/pairs.jsonl"}``): a training stage's output is its ``final/``, a
recipe stage's its directory, a step's the path it returns (else its directory). The stage is timed
(:attr:`StageRunner.timings`), and ``check`` may refuse its result before later stages run.

A training stage runs in ``<root>/stages/<name>/`` (or ``dir``) as an ordinary trainer run. It may start from
another stage's ``final/`` (``start``; a chain's ``init_from``, the previous stage by default):

- an adapter there becomes ``model.init_adapter`` (with ``model.init_adapter_mode`` = the stage's
  ``init_mode``, merge or continue) on top of the model path that stage itself started from;
- a full model there (a stage trained without LoRA) becomes ``model.path``.

Re-running the same command skips a training stage whose ``run_complete.json`` exists (after checking that its
saved config equals the one composed now), and resumes an interrupted stage from its newest complete
checkpoint (``trainer.resume=auto``; whether there is one is asked of ``trainer/runtime/checkpoint.py``). A stage
records what it started from (``stage_start.json``: the content hash of the previous stage's ``final/`` or of
the base model, ``recipes/stages/start.py``); a stage whose start changed since (an earlier stage was
retrained) is not complete: it is refused naming both hashes, or retrained with ``rerun_stale=True``
(``trainer.rerun_stale_stages=true``; the stage runs with ``trainer.overwrite=true``, which moves the old one
aside). A stage whose ``run_complete.json`` exists but whose ``final/`` lost its weights is resumed from its
newest complete checkpoint (which rewrites ``final/``), or retrained when it has none. Every rank of a
multi-process launch runs the runner and takes the same decisions from the same files; only the training run
itself (its main process) moves or writes stage files.

A training stage that stops early (SIGTERM or SIGUSR1, ``trainer.stop_at_step``) has saved its checkpoint: the
runner prints one line and exits 0, the rule of every entry point (a requeue wrapper reruns a command that exits
0 without ``run_complete.json``; 1 would mean a failure); running the same command again continues it. Ctrl-C
exits 130 from the training loop itself, after the same save. A stop that reaches a training stage after its last
step (while it saves it, or evaluates) lets the stage finish, then ends the process in one line before the next
stage (``LoopResult.late_stop``; exit 0, 130 after Ctrl-C). A stop signal while any other stage runs (an
evaluation, a data build, a model loading) ends the process in one line too, exit 0 after SIGTERM and 130 after
Ctrl-C: that stage keeps nothing, finished stages are kept. :meth:`StageRunner.hold` holds the root's lock (one
orchestrator per root) and its log file; ``record`` (a chain's ``chain.json``) records each stage.

A recipe stage that is not a training run (an evaluation, pair mining) is recorded when it finishes
(``stage_complete.json`` in its directory: its composed config, the content hash of each input, its result, the
hash of each file it wrote) and reused while that record matches and the stage's files match their hashes, its
result then read from the stage's own result file (``metrics.json``; ``recipes/stages/record.py``); a record
that does not match (other settings, an input that changed, an output edited or missing) or cannot be read (cut
short) reruns the stage, the earlier run moved aside to ``<name>.old-<n>``. A runner given ``provenance`` (a function of
a stage's config: ``trainer/runtime/provenance.py``; the demos) records it in every finished stage's
``stage_complete.json`` (a training stage's too) and, under ``reuse="strict"``, reuses a stage only while it matches
(a record without one does not), else reruns it moved aside, in one line naming the fields; ``reuse="config"`` reuses
on the config alone and says so. With ``rerun_changed`` (the demos) a finished or interrupted training stage whose
composed config changed is retrained, the old one moved aside, instead of refused. A step (``call``) runs every
time: steps are cheap (a cached conversion, a data build), and the stages reading their output pin it by content. A
training stage's inputs are pinned in its ``stage_start.json`` with its start weights, under the same rule as those.
Configs are compared with the out dir and the model cache written portably (``trainer/runtime/relocation.py``), so a
copied or moved out dir, or another cache holding the same entry, reuses its finished stages."""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any, Callable

from recipes.stages.process import main_process
from recipes.stages.reuse import RecipeStages
from recipes.stages.signals import StopSignals
from recipes.stages.training import TrainingStages
from selectrust.core.errors import ConfigError
from trainer.runtime.relocation import started_from  # saved stage configs read wherever the out dir and cache are
from trainer.runtime.stage import STAGE_NAME, Stage
import logging


def _quote(value: Any) -> str:
    """A Hydra override value for a path (quoted, so any character but a quote is literal)."""
    text = str(value)
    if "'" in text:
        raise ConfigError(f"path {text!r}: a quote character cannot be passed through a Hydra override")
    return f"'{text}'"


def is_training(cfg) -> bool:
    """A training recipe's config: it has a ``trainer`` section (the stage trains in ``trainer.run_dir``)."""
    return "trainer" in cfg


class StageRunner(TrainingStages, RecipeStages, StopSignals):
    """Runs :class:`Stage` s in directories under ``root`` (see the module docstring)."""

    def __init__(self, root, *, seed: int, compose: Callable[[str, list[str]], Any] | None,
                 runners: dict[str, Callable[[Any], Any]], prefix: str = "[chain]",
                 log: Callable[[str], None] | None = None, rerun_stale: bool = False, record: str | None = None,
                 rerun_changed: bool = False, provenance: Callable[[Any], dict] | None = None, reuse: str = "strict"):
        self.root = Path(root).expanduser().resolve()
        self.seed, self.compose, self.runners, self.prefix = seed, compose, runners, prefix
        self.log = log or (lambda msg: print(f"{prefix} {msg}", flush=True))
        self.rerun_stale, self.record = rerun_stale, record
        # a finished (or interrupted) training stage whose composed config changed is retrained, the old one moved
        # aside, instead of refused (the demos: a settings change reruns only the stages it changes)
        self.rerun_changed = rerun_changed
        # stage config -> the stage's provenance (trainer/runtime/provenance.py), recorded in stage_complete.json and
        # required to match for reuse ("strict"), or only recorded ("config": reuse on the config alone); None:
        # neither recorded nor checked (the chains)
        self.provenance, self.reuse = provenance, reuse
        self.made_under: dict[str, dict | None] = {}  # each recipe stage's provenance: recorded (reused) or now
        self.records: dict[str, dict] = {}  # what chain.json holds: each stage's status
        self.timings: dict[str, float] = {}  # seconds per stage, as run now
        self.outputs: dict[str, str] = {}  # what an input naming the stage refers to
        self.dirs: dict[str, Path] = {}
        self._late_stop: int | None = None  # a stop signal a training stage's loop took after its last step

    # -- where stages write, and what they read ------------------------------------------------------
    def _declare(self, stage: Stage) -> None:
        if not STAGE_NAME.match(stage.name):
            raise ConfigError(f"stage {stage.name!r}: a stage name must be letters, digits, '_', '-' or '.'")
        for key, ref in stage.inputs.items():
            if ref.split("/", 1)[0] not in self.dirs:
                raise ConfigError(f"stage {stage.name!r}: input {key}={ref!r} names no earlier stage "
                                  f"(earlier: {list(self.dirs)})")
        self.dirs[stage.name] = self.root / (stage.dir or f"stages/{stage.name}")

    def stage_dir(self, name: str) -> Path:
        return self.dirs.get(name, self.root / "stages" / name)

    def input_overrides(self, stage: Stage, planned: bool = False) -> list[str]:
        """``key='<path>'`` for each input: the named stage's output (where it will be, when ``planned``)."""
        out = []
        for key, ref in stage.inputs.items():
            source, _, rest = ref.partition("/")
            output = self.outputs.get(source) or (str(self.stage_dir(source)) if planned else None)
            if output is None:
                raise ConfigError(f"stage {stage.name!r}: input {key}={ref!r}: stage {source!r} has not run")
            out.append(f"{key}={_quote(Path(output) / rest if rest else output)}")
        return out

    def start_overrides(self, source: str | None, mode: str) -> list[str]:
        """Overrides that make a stage start from ``source``'s ``final/`` (none for ``source=None``)."""
        if source is None:
            return []
        final = self.stage_dir(source) / "final"
        if (final / "adapter_config.json").is_file():
            start = started_from(self.stage_dir(source))  # its saved model, where it is now (a moved out dir)
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

    def compose_stage(self, stage: Stage, extra: tuple[str, ...] = (), *, planned: bool = False):
        """The stage's recipe config: its overrides, the seed, its start weights and inputs, ``extra``; then its
        directory. ``planned``: before anything ran (no start weights; inputs where they will be)."""
        from omegaconf import OmegaConf  # deferred: imports omegaconf

        start = [] if planned else self.start_overrides(stage.start, stage.init_mode)
        seed = self.seed if stage.seed is None else stage.seed
        cfg = self.compose(stage.recipe, [*stage.overrides, f"seed={seed}", *start,
                                          *self.input_overrides(stage, planned), *extra])
        OmegaConf.update(cfg, "trainer.run_dir" if is_training(cfg) else "out_dir", str(self.stage_dir(stage.name)))
        return cfg

    def check(self, stages: list[Stage], validators: dict[str, Callable[[Any], None]] | None = None) -> None:
        """Compose every recipe stage's config (and validate it, where ``validators`` names its recipe) before any
        stage runs, without start weights and with inputs where they will be, so a misspelt override in the last
        stage fails before the first one runs."""
        from omegaconf import OmegaConf  # deferred: imports omegaconf

        for stage in stages:
            self._declare(stage)
            if stage.recipe is None:
                continue
            try:
                cfg = self.compose_stage(stage, planned=True)
                if stage.recipe in (validators or {}):
                    try:
                        validators[stage.recipe](cfg)
                    except FileNotFoundError as e:
                        if str(self.root) not in str(e):
                            raise  # a path inside the run directory is an earlier stage's output, not made yet
                OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)  # e.g. an unset data.train_path
            except Exception as e:  # noqa: BLE001 - re-raised naming the stage
                raise ConfigError(f"stages.{stage.name} ({stage.recipe}.py with {stage.overrides}): "
                                  f"{type(e).__name__}: {e}") from e

    # -- running -----------------------------------------------------------------------------------
    def run_all(self, stages: list[Stage]) -> dict[str, Any]:
        """Run every stage in order; writes ``record`` (if any). Returns ``{stage: result}``."""
        results = {stage.name: self.run_stage(stage) for stage in stages}
        self.write_record()
        return results

    def run_stage(self, stage: Stage) -> Any:
        """Run (or reuse, or resume) one stage and time it; a training stage that stopped early, or a stop signal
        (SIGTERM, Ctrl-C) during any stage, ends the process in one line. Returns the stage's result: a training
        stage's ``final/``, a recipe's return value, a step's."""
        self._declare(stage)
        t0 = time.time()
        with self._signals_end(stage):
            result, output = self._run(stage)
        self.outputs[stage.name] = str(output)
        self.timings[stage.name] = round(time.time() - t0, 1)
        self.log(f"{stage.name}: {self.timings[stage.name]:.0f} s")
        if self._late_stop is not None:
            self._stopped_after(stage, self._late_stop)
        if stage.check is not None:
            stage.check(result)
        return result

    def _run(self, stage: Stage) -> tuple[Any, Any]:
        """(result, output) of one stage."""
        out = self.stage_dir(stage.name)
        if stage.call is not None:  # a step: cheap (a cached conversion, a data build), so run every time
            result = stage.call(out, self.input_paths(stage)) if stage.inputs else stage.call(out)
            self.records[stage.name] = {"status": "ran"}
            return result, result if isinstance(result, (str, Path)) else out
        cfg = self.compose_stage(stage)
        if is_training(cfg):
            final = self.train(stage, cfg)
            if final is None:
                self._stopped(stage)
            return final, final
        from omegaconf import OmegaConf  # deferred: imports omegaconf

        from trainer.runtime.run_dir import schema_defaults  # deferred: imports torch, numpy

        provenance = {"recipe": stage.recipe, "config": OmegaConf.to_container(cfg, resolve=True)}
        if self.provenance is not None:
            provenance["provenance"] = self.provenance(cfg)
        return self._reuse_or_run(stage, provenance, lambda: self.runners[stage.recipe](cfg),
                                  defaults=schema_defaults(cfg)), out

    def input_paths(self, stage: Stage) -> dict[str, Path | str]:
        """``{key: path}`` of the stage's inputs: each named earlier stage's output (which has run) joined with the
        path inside it, or that output as the stage gave it (a str; e.g. a hub id) when the input names no path."""
        out = {}
        for key, ref in stage.inputs.items():
            source, _, rest = ref.partition("/")
            out[key] = Path(self.outputs[source]) / rest if rest else self.outputs[source]
        return out

    def input_identity(self, stage: Stage) -> dict:
        """``{key: {"path", "sha256"}}`` of the stage's inputs as they are now (``stage_start.path_identity``)."""
        from recipes.stages.start import path_identity  # deferred: import cycle with recipes.stages.start

        return {key: path_identity(path) for key, path in self.input_paths(stage).items()}

    def write_record(self) -> None:
        if self.record is not None:
            from selectrust.core.io import write_json_atomic

            write_json_atomic(self.root / self.record, {"stages": self.records})

    @contextlib.contextmanager
    def hold(self, log_name: str, *, claim: Callable[[], None] | None = None, key: str = "trainer.run_dir"):
        """Hold ``<root>/.lock`` (``trainer.runtime.run_dir.RunLock``; a refusal names ``key``, the setting that chose the
        root) while the block runs, call ``claim`` (e.g. to check or move aside what the root holds), then append this
        runner's log to ``<root>/<log_name>``: a second orchestrator into the same root is refused (naming the
        holder) before it writes anything. The log file also receives the process's logging records. (The entry
        point turns off Hydra's own job log file: conf/chain.yaml.) Other ranks of a launch only print."""
        from trainer.runtime.run_dir import RunLock  # deferred: imports torch, numpy

        if not main_process():
            yield
            return
        self.root.mkdir(parents=True, exist_ok=True)
        lock = RunLock(self.root, key=key).acquire()
        try:
            if claim is not None:
                claim()
            handler = logging.FileHandler(self.root / log_name)
        except BaseException:
            lock.release()
            raise
        handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
        logging.getLogger().addHandler(handler)
        printed = self.log

        def log(msg: str) -> None:
            printed(msg)
            handler.handle(logging.LogRecord(self.prefix.strip("[]"), logging.INFO, __file__, 0, msg, None, None))

        self.log = log
        try:
            yield
        finally:
            self.log = printed
            logging.getLogger().removeHandler(handler)
            handler.close()
            lock.release()
