"""What both demos share (:mod:`demos.real.pipeline`, :mod:`demos.toy.pipeline`): running their declared stages
through the stage runner (``recipes/stages/``) in an out dir that keeps one run (:class:`DemoRun`), the
thread setting, writing the results at the end, and the SCOPE training plot of both reports."""

from __future__ import annotations

import contextlib
import json
import sys
import time
from pathlib import Path
from typing import Any, Callable

from selectrust.conditions import MIST_CONDITIONS as CONDS
from trainer.runtime.provenance import run_provenance, stage_provenance
from selectrust.core.io import write_json_atomic
from selectrust.core.errors import ConfigError
from trainer.runtime.provenance import differing_fields, ran_in, stage_precisions


def set_threads(n: int | None) -> None:
    """torch intra-op threads for every stage of the demo (None: torch's default)."""
    if n:
        import torch

        torch.set_num_threads(n)


RECORD = "demo.json"  # the out dir's demo, seed and settings
WRITES = (RECORD, "stages", "summary.json", "report.md")  # what shows that an out dir holds a demo run


def refuse(message: str) -> None:
    """Refuse to run, in one line on stderr: exit 2 (nothing was run or changed)."""
    print(f"[demo] refused: {message}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def demo_settings(cfg) -> dict:
    """What a demo run's results depend on (``demo.json``): the demo, the seed and the demo's own settings (demo=real
    or real_full: the ``real`` section of ``conf/demo.yaml``; demo=toy: the ``toy`` section)."""
    from omegaconf import OmegaConf  # deferred: imports omegaconf

    keys = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)  # the typed settings as plain values
    return {"demo": keys["demo"], "seed": keys["seed"], "settings": _own_settings(keys, str(cfg.demo))}


def _own_settings(keys: dict, demo: str) -> dict:
    """The settings a run of ``demo`` depends on, out of a whole demo config (``keys``): its section
    (``demos.config.DEMOS``: ``real`` for the real-model demos, ``toy`` for the toy)."""
    from .config import DEMOS  # deferred: imports omegaconf

    section = DEMOS.get(demo).section
    return {section: keys[section]}


#: The toy demo's keys that sat at the config's root before they moved under ``toy`` (issue 41).
TOY_KEYS_MOVED = ("box2", "misleading_only", "knowledge_aware", "torch_threads", "stages")


def _moved_toy_keys(settings: dict) -> dict:
    """A toy run's recorded settings from before its keys moved under ``toy`` (:data:`TOY_KEYS_MOVED` at the
    root), as they read now; any other settings as they are."""
    if "toy" in settings or not any(k in settings for k in TOY_KEYS_MOVED):
        return settings
    return {"toy": {k: v for k, v in settings.items() if k in TOY_KEYS_MOVED},
            **{k: v for k, v in settings.items() if k not in TOY_KEYS_MOVED}}


def with_new_keys(saved: dict, demo: str) -> dict:
    """A ``demo.json`` record (:func:`demo_settings`) with every settings key it lacks set to the schema's default:
    a key added to ``demos/config.py`` after the run was recorded, whose default is what runs did before it existed
    (the rule for adding a key), so an earlier run of the same settings still reads as the same run; a toy run's
    keys recorded before they moved under ``toy`` are read there."""
    from omegaconf import OmegaConf  # deferred: imports omegaconf

    from .config import DemoRunConfig  # deferred: imports omegaconf

    own = _own_settings(OmegaConf.to_container(OmegaConf.structured(DemoRunConfig(demo=demo)), resolve=True), demo)

    def fill(have, default):
        if not isinstance(have, dict) or not isinstance(default, dict):
            return have
        return {**{k: v for k, v in default.items() if k not in have}, **{k: fill(v, default.get(k)) for k, v in have.items()}}

    return {**saved, "settings": fill(_moved_toy_keys(saved.get("settings") or {}), own)}


class DemoRun:
    """One demo run into ``cfg.out``: its stages run by name through the stage runner, with the recipes' ``run``
    functions (``runners``), ``compose`` and the stage runner itself (``stage_runner``: ``recipes.stages.StageRunner``,
    which sits above the recipes it runs) handed down by the entry point (``recipes/demo.py``).

    The out dir is one run's: ``demo.json`` records its demo, seed and settings. The same command again (after an
    interrupt, or after it finished) continues that run: every finished stage whose composed config, inputs, start
    and provenance (``trainer/runtime/provenance.py``: precision actually used, threads, git commit, package versions;
    ``reuse=config`` drops the provenance) match is reused, an interrupted training stage resumes from its newest
    complete checkpoint. Other settings of the same demo and seed continue it too (the changed keys said in one
    line, ``demo.json`` rewritten): only the stages whose own config, inputs, start or provenance they change run
    again, each earlier one moved aside to ``<stage>.old-<n>``. Another demo or seed into it is refused in one line,
    or, with ``overwrite=true``, the old run is moved aside to ``<out>.old-<n>`` first. A second demo into an out
    dir in use is refused by its lock (``<out>/.lock``); ``demo.log`` is written only under the lock."""

    def __init__(self, cfg, *, compose: Callable[[str, list[str]], Any], runners: dict[str, Callable],
                 checks: dict[str, Callable[[Any], None]], threads: int | None, stage_runner: Callable[..., Any]):

        self.cfg = cfg
        self.checks = checks  # {recipe: its config check}: the chain's (recipes/chain.py trainers), run before any stage
        self.out = Path(cfg.out).expanduser().resolve()
        set_threads(threads)
        self.provenance = run_provenance()  # the run's: precision auto means here, threads, git commit, versions
        # a stage whose start, inputs, config or provenance changed since (the cached model converted again, a
        # settings change, other code) is run again, the old one moved aside; any other is reused
        self.runner = stage_runner(self.out, seed=cfg.seed, compose=compose, runners=runners, prefix="[demo]",
                                  rerun_stale=True, rerun_changed=True, reuse=str(cfg.reuse),
                                  provenance=lambda stage_cfg: stage_provenance(stage_cfg, self.provenance))

    def claim(self) -> None:
        """Under the out dir's lock: the out dir is new, or holds a run of this demo and seed (continued; other
        settings said in one line, the stage runner reruns the stages they change); else refused, or moved aside
        with ``overwrite=true``. Then ``demo.json`` records this run's."""
        from trainer.runtime.run_dir import config_differences, move_aside  # deferred: imports torch, numpy

        now, record = demo_settings(self.cfg), self.out / RECORD
        held = [name for name in WRITES if (self.out / name).exists()]
        if held and self.cfg.overwrite:
            self.runner.log(f"overwrite=true: moved the earlier run in {self.out} to {move_aside(self.out)}")
        elif held:
            saved = with_new_keys(json.loads(record.read_text()), self.cfg.demo) if record.is_file() else None
            diffs = config_differences(saved, now) if saved is not None else [
                f"no {RECORD} (a run of an earlier version, of unknown seed and settings: {', '.join(held)})"]
            settings = [d for d in diffs if d.startswith("settings.")]
            if len(settings) < len(diffs):  # another demo or seed: no stage of it can be reused
                refuse(f"{self.out} holds a demo run of another demo or seed ({'; '.join(diffs)}); it is kept. Pass "
                       f"overwrite=true to move it aside to {self.out.name}.old-<n>, or choose another out=")
            if settings:
                self.runner.log(f"continuing the run in {self.out} with changed settings ({'; '.join(settings)}): "
                                f"the stages whose own config they change run again (each earlier one moved to "
                                f"<stage>.old-<n>), the others are reused")
            else:
                self.runner.log(f"continuing the run in {self.out} (same demo, seed and settings): finished stages "
                                f"are reused")
        write_json_atomic(record, now)

    def run(self, stages: list, summarise: Callable[[dict[str, Any]], dict], write_report: Callable[[dict, Path], Any],
            print_table: Callable[[dict], None], targets: Callable[[dict], dict] | None = None,
            before_stages: Callable[[], Any] | None = None, after_stages: Callable[[], Any] | None = None) -> dict:
        """Compose every stage's config (a bad override fails before anything runs), take the out dir (lock,
        ``demo.json``), run the stages and write ``summary.json`` (``summarise(results)`` with the stage and wall
        times, and ``targets(summary)``) and the report; print the table; return the summary."""
        from trainer.runtime.run_dir import RunDirLocked  # deferred: imports torch, numpy


        t_start = time.time()
        try:
            self.runner.check(stages, self.checks)  # every stage's config, with the chain's validators
        except ConfigError as e:
            refuse(str(e))
        with contextlib.ExitStack() as held:
            try:
                held.enter_context(self.runner.hold("demo.log", claim=self.claim, key="out"))
            except RunDirLocked as e:
                refuse(str(e))
            if before_stages is not None:  # under the out dir's lock (the real demo's stage cache, issue 60)
                before_stages()
            results = self.runner.run_all(stages)
            if after_stages is not None:
                after_stages()
            summary = summarise(results)
            summary["stage_seconds"] = self.runner.timings
            summary.update(self.provenance_summary())
            summary["wall_seconds"] = round(time.time() - t_start, 1)
            reused = [name for name, r in self.runner.records.items() if r.get("status") == "skipped"]
            if reused:  # finished by an earlier run of the same command: their time is not in this run's
                summary["reused_stages"] = reused
            if targets is not None:
                summary["targets"] = targets(summary)
            return self.finish(summary, write_report, print_table)

    def provenance_summary(self) -> dict:
        """``summary.json``'s ``provenance`` (the run's: ``trainer.runtime.provenance.run_provenance``, its CPU model and
        instruction sets included, with ``precision``: what the stages computed in, one name or ``mixed``, and
        ``stage_precision``: each recipe stage's, recorded when reused; not what ``auto`` would resolve to), ``reuse``
        (the reuse rule: ``config`` says a stage may have been reused under another provenance) and, for each stage
        whose recorded threads, commit, versions or CPU differ from the run's, ``stage_provenance``
        (``{stage: {field: its value}}``)."""
        precisions = stage_precisions(self.runner.made_under)
        out: dict = {"provenance": {**self.provenance, "precision": ran_in(precisions),
                                    "stage_precision": precisions},
                     "reuse": str(self.cfg.reuse)}
        differ = {name: d for name, made in self.runner.made_under.items()
                  if (d := differing_fields(made, self.provenance, skip=("precision",)))}
        if differ:
            out["stage_provenance"] = differ
        return out

    def finish(self, summary: dict, write_report: Callable[[dict, Path], Any],
               print_table: Callable[[dict], None]) -> dict:
        """Write ``<out>/summary.json`` and the report (``report.md`` and plots), print the table; return ``summary``."""
        write_json_atomic(self.out / "summary.json", summary)
        write_report(summary, self.out)
        print_table(summary)
        print(f"[demo] done in {summary['wall_seconds']:.0f} s: {self.out / 'report.md'}, {self.out / 'summary.json'}",
              flush=True)
        return summary


def wall_line(summary: dict) -> str:
    """The report's line of wall and stage times (and the stages a continued run reused, whose time is not in it)."""
    line = (f"Wall time: {summary['wall_seconds']:.0f} s. Stage times (s): "
            + ", ".join(f"{k} {v}" for k, v in summary.get("stage_seconds", {}).items()))
    if summary.get("reused_stages"):
        line += (". Reused from an earlier run of the same command (their time is not counted): "
                 + ", ".join(summary["reused_stages"]))
    return line


def draw_scope_training(ax, ax2, metrics_path: Path) -> None:
    """The SCOPE run's training curves from its ``metrics.jsonl``: the reward margin per condition on ``ax``, the
    DPO loss on ``ax2`` (both demos' reports)."""
    lines = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    for c in CONDS:
        pts = [(m["step"], m[f"rewards/margins/{c}"]) for m in lines if f"rewards/margins/{c}" in m]
        if pts:
            ax.plot(*zip(*pts), label=c, lw=1)
    ax.set_xlabel("step")
    ax.set_ylabel("reward margin")
    ax.set_title("SCOPE training: margin per condition", fontsize=9)
    ax.legend(fontsize=7)
    pts = [(m["step"], m["loss"]) for m in lines if "loss" in m]
    if pts:
        ax2.plot(*zip(*pts), lw=1)
    ax2.set_xlabel("step")
    ax2.set_ylabel("DPO loss")
