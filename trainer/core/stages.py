"""The stage runner: named stages run one after another in this process, each in its own directory under one root.

It runs the chains (``recipes/chain.py``), the distillation pipelines (``trainer/distill/pipeline.py``,
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
checkpoint (``trainer.resume=auto``; whether there is one is asked of ``trainer/core/checkpoint.py``). A stage
records what it started from (``stage_start.json``: the content hash of the previous stage's ``final/`` or of
the base model, ``trainer/core/stage_start.py``); a stage whose start changed since (an earlier stage was
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
result then read from the stage's own result file (``metrics.json``; ``trainer/core/stage_record.py``); a record
that does not match (other settings, an input that changed, an output edited or missing) or cannot be read (cut
short) reruns the stage, the earlier run moved aside to ``<name>.old-<n>``. A runner given ``provenance`` (a function of
a stage's config: ``trainer/core/provenance.py``; the demos) records it in every finished stage's
``stage_complete.json`` (a training stage's too) and, under ``reuse="strict"``, reuses a stage only while it matches
(a record without one does not), else reruns it moved aside, in one line naming the fields; ``reuse="config"`` reuses
on the config alone and says so. With ``rerun_changed`` (the demos) a finished or interrupted training stage whose
composed config changed is retrained, the old one moved aside, instead of refused. A step (``call``) runs every
time: steps are cheap (a cached conversion, a data build), and the stages reading their output pin it by content. A
training stage's inputs are pinned in its ``stage_start.json`` with its start weights, under the same rule as those.
Configs are compared with the out dir and the model cache written portably (``trainer/core/relocation.py``), so a
copied or moved out dir, or another cache holding the same entry, reuses its finished stages."""

from __future__ import annotations

import contextlib
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from trainer.config import ConfigError

from .relocation import portable_pair, started_from  # saved stage configs read wherever the out dir and cache are
from .stage_record import COMPLETE_RECORD  # a finished stage that is not a training run: its record

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


class _StopSignal(Exception):
    """SIGTERM arrived while a stage ran outside a training loop."""

    def __init__(self, signum: int):
        super().__init__(f"signal {signum}")
        self.signum = signum


@dataclass
class Stage:
    """One stage of a :class:`StageRunner` (see the module docstring)."""

    name: str
    recipe: str | None = None  # a name of the runner's ``runners``, run on the config composed from ``overrides``
    overrides: list[str] = field(default_factory=list)
    inputs: dict[str, str] = field(default_factory=dict)  # config key -> "<earlier stage>[/<path in its output>]"
    start: str | None = None  # a training stage: the earlier stage whose final/ weights it starts from
    init_mode: str = "merge"  # an adapter there is merged into model.path, or trained on (continue)
    call: Callable[..., Any] | None = None  # instead of a recipe: a step of the stage's directory (and its inputs')
    check: Callable[[Any], None] | None = None  # raises when the result is unusable, before a later stage runs
    dir: str | None = None  # the stage's directory relative to the root (default stages/<name>)
    seed: int | None = None  # its own seed (None: the runner's): a seed-independent stage's (demos/real/stage_cache.py)


def stage_sources(stages, recipes) -> dict[str, str | None]:
    """``{stage: the stage it starts from, or None}`` of a chain's ``stages`` (``StageConfig`` by name), each a
    recipe of ``recipes``; raises ConfigError on a bad chain (before any model loads)."""
    if not stages:
        raise ConfigError("stages: the chain names no stage (pick a chain recipe, e.g. recipe=box2_tiny)")
    out: dict[str, str | None] = {}
    previous = None
    for name, st in stages.items():
        where = f"stages.{name}"
        if not _NAME.match(name):
            raise ConfigError(f"{where}: a stage name must be letters, digits, '_', '-' or '.' (it names a directory)")
        if st.script not in recipes:
            raise ConfigError(f"{where}.script={st.script!r} is not one of {', '.join(recipes)}")
        source = previous if st.init_from == "previous" else st.init_from
        if source is not None and source not in out:
            raise ConfigError(f"{where}.init_from={st.init_from!r}: no earlier stage of that name (earlier: {list(out)})")
        out[name] = source
        previous = name
    return out


def chain_stages(stages, common, recipes) -> list[Stage]:
    """A chain's ``stages`` (``StageConfig`` by name) as :class:`Stage` s: ``overrides``, then ``common``, then
    ``extra``; each starting from its ``init_from``."""
    sources = stage_sources(stages, recipes)
    return [Stage(name, st.script, [*st.overrides, *common, *st.extra], start=sources[name], init_mode=st.init_mode)
            for name, st in stages.items()]


def _quote(value: Any) -> str:
    """A Hydra override value for a path (quoted, so any character but a quote is literal)."""
    text = str(value)
    if "'" in text:
        raise ConfigError(f"path {text!r}: a quote character cannot be passed through a Hydra override")
    return f"'{text}'"


def is_training(cfg) -> bool:
    """A training recipe's config: it has a ``trainer`` section (the stage trains in ``trainer.run_dir``)."""
    return "trainer" in cfg


class StageRunner:
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
        # stage config -> the stage's provenance (trainer/core/provenance.py), recorded in stage_complete.json and
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
        if not _NAME.match(stage.name):
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
        from omegaconf import OmegaConf

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
        from omegaconf import OmegaConf

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
        from omegaconf import OmegaConf

        from .run_dir import schema_defaults

        provenance = {"recipe": stage.recipe, "config": OmegaConf.to_container(cfg, resolve=True)}
        if self.provenance is not None:
            provenance["provenance"] = self.provenance(cfg)
        return self._reuse_or_run(stage, provenance, lambda: self.runners[stage.recipe](cfg),
                                  defaults=schema_defaults(cfg)), out

    def _reuse_or_run(self, stage: Stage, provenance: dict, run: Callable[[], Any], defaults=None) -> Any:
        """A recipe stage that is not a training run: reused when its completion record (``stage_complete.json``:
        its recipe and config, the content hash of each input, its result, the hashes of its outputs) matches now
        and its outputs match their hashes (the result then read from the stage's own result file:
        ``trainer/core/stage_record.py``); else run (an earlier run is moved aside to ``<name>.old-<n>`` first) and
        recorded. A record that cannot be read (cut short) is no completion: the stage runs again, said in one line."""
        from selectrust.core.io import write_json_atomic

        from .run_dir import config_differences, move_aside
        from .stage_record import read_record, seal, verified_result
        from .stage_start import start_differences

        out = self.stage_dir(stage.name)
        now = {**provenance, "inputs": self.input_identity(stage)}
        record, unreadable = read_record(out / COMPLETE_RECORD)
        why = unreadable and f"not complete: {unreadable}"
        if record is not None:
            diffs = [] if record.get("recipe") == stage.recipe else [f"recipe: {record.get('recipe')} != {stage.recipe}"]
            diffs += config_differences(*portable_pair(record.get("config", {}), now["config"], "out_dir"), "config.",
                                        defaults=defaults)
            diffs += start_differences(record.get("inputs", {}), now["inputs"])
            result, untrusted, note = (None, None, None) if diffs else verified_result(record, out)
            changed = [] if diffs or untrusted else self._provenance_changed(
                stage.name, record.get("provenance"), now.get("provenance"))
            if not diffs and not untrusted and not changed:
                if note:
                    self.log(f"{stage.name}: {note}")
                self.log(f"{stage.name}: already complete ({out / COMPLETE_RECORD}), reused")
                self.records[stage.name] = {"status": "skipped"}
                self.made_under[stage.name] = record.get("provenance")
                return result
            why = (f"finished with other settings or inputs ({'; '.join(diffs)})" if diffs
                   else f"not reused: {untrusted}" if untrusted
                   else f"its provenance differs from this run's ({'; '.join(changed)})")
        if why:
            self.log(f"{stage.name}: {why}: running it again (the earlier one is moved to {out.name}.old-<n>)")
            if _main_process():
                move_aside(out)
        result = run()
        if _main_process():
            write_json_atomic(out / COMPLETE_RECORD, {**now, "result": result})
            seal(out / COMPLETE_RECORD)
        self.records[stage.name] = {"status": "ran"}
        self.made_under[stage.name] = now.get("provenance")
        return result

    def _provenance_changed(self, name: str, recorded: dict | None, now: dict | None) -> list[str]:
        """How a finished stage's recorded provenance differs from ``now`` (``provenance.provenance_differences``);
        [] when it matches, when this runner checks none (``now`` None), or under ``reuse="config"`` (the
        difference then said in one line)."""
        if now is None:
            return []
        from .provenance import provenance_differences

        diffs = provenance_differences(recorded, now)
        if diffs and self.reuse == "config":
            self.log(f"{name}: reused on its config alone (reuse=config) although its provenance differs from this "
                     f"run's ({'; '.join(diffs)})")
            return []
        return diffs

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
        from .stage_start import path_identity

        return {key: path_identity(path) for key, path in self.input_paths(stage).items()}

    @contextlib.contextmanager
    def _signals_end(self, stage: Stage):
        """While a stage runs (outside a training loop's own handling), SIGTERM and Ctrl-C end the process in one
        line: exit 0 for SIGTERM (the stop rule of every entry point), 130 for Ctrl-C; finished stages are kept.
        Ctrl-C is Python's own handler here also when the process inherited SIGINT ignored (a job started with
        ``&`` or ``nohup`` by a non-interactive shell): the training loop takes SIGINT whatever it inherited, so
        every other stage does too. The handlers found are put back when the stage ends."""
        import signal

        def stop(signum, frame):
            raise _StopSignal(signum)

        previous = {}
        for sig, handler in ((signal.SIGTERM, stop), (signal.SIGINT, signal.default_int_handler)):
            try:
                previous[sig] = signal.signal(sig, handler)
            except ValueError:  # not the main thread
                pass
        try:
            yield
        except (KeyboardInterrupt, _StopSignal) as e:
            ctrl_c = isinstance(e, KeyboardInterrupt)
            self.log(f"stage {stage.name} stopped by {'Ctrl-C' if ctrl_c else 'SIGTERM'} before it finished (finished "
                     f"stages are kept); run the same command again to continue")
            raise SystemExit(130 if ctrl_c else 0) from None
        except SystemExit as e:
            if e.code == 130:  # Ctrl-C in a training loop, which saved its checkpoint and exits 130 itself
                self.log(f"stage {stage.name} stopped by Ctrl-C (its checkpoint is saved); run the same command again "
                         f"to continue")
            raise
        finally:
            for sig, handler in previous.items():
                if handler is not None:  # None: a handler not set from Python, which cannot be put back
                    signal.signal(sig, handler)

    def _stopped(self, stage: Stage) -> None:
        """A training stage stopped early after saving its checkpoint: record it, say so in one line, exit 0."""
        self.write_record()
        step = self.records[stage.name].get("step")
        self.log(f"stage {stage.name} stopped early (its checkpoint is saved); run the same command again to "
                 f"continue (from step {step})")
        raise SystemExit(0)

    def _stopped_after(self, stage: Stage, signum: int) -> None:
        """A stop signal arrived while a training stage finished (its last save, its final evaluation): the stage
        is complete; say so in one line and exit (0 for SIGTERM or SIGUSR1, 130 for Ctrl-C) before the next stage."""
        import signal

        self.write_record()
        ctrl_c = signum == signal.SIGINT
        self.log(f"stage {stage.name} finished; stopped by {'Ctrl-C' if ctrl_c else signal.Signals(signum).name} "
                 f"before the next stage (finished stages are kept); run the same command again to continue")
        raise SystemExit(130 if ctrl_c else 0)

    def write_record(self) -> None:
        if self.record is not None:
            from selectrust.core.io import write_json_atomic

            write_json_atomic(self.root / self.record, {"stages": self.records})

    def train(self, stage: Stage, cfg) -> Path | None:
        """Train (or skip, or resume) one training stage; returns its ``final/`` directory, or None when it
        stopped early."""
        from trainer.core.checkpoint import resumable
        from trainer.core.stage_record import recorded_provenance, write_training_record
        from trainer.core.stage_start import read_start, write_start

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
        if read_start(run_dir) is None and not retrain and _main_process():
            write_start(run_dir, start)
        _reset_accelerate()
        t0 = time.time()
        result = self.runners[stage.recipe](cfg)
        if _main_process() and (retrain == "retrain" or read_start(run_dir) is None):  # overwrite moved the old one
            write_start(run_dir, start)
        if result is None or result.stopped_early:
            self.records[name] = {"status": "stopped", "step": getattr(result, "step", None)}
            return None
        if now is not None and _main_process():
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
        from omegaconf import OmegaConf

        from .checkpoint import resumable
        from .run_dir import config_differences
        from .stage_record import recorded_provenance

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
        from .stage_start import read_start, start_differences, start_identity

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
        from .checkpoint import checkpoints_dir, complete_checkpoints
        from .stage_start import final_is_complete

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

    @contextlib.contextmanager
    def hold(self, log_name: str, *, claim: Callable[[], None] | None = None, key: str = "trainer.run_dir"):
        """Hold ``<root>/.lock`` (``trainer.core.run_dir.RunLock``; a refusal names ``key``, the setting that chose the
        root) while the block runs, call ``claim`` (e.g. to check or move aside what the root holds), then append this
        runner's log to ``<root>/<log_name>``: a second orchestrator into the same root is refused (naming the
        holder) before it writes anything. The log file also receives the process's logging records. (The entry
        point turns off Hydra's own job log file: conf/chain.yaml.) Other ranks of a launch only print."""
        import logging

        from .run_dir import RunLock

        if not _main_process():
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
