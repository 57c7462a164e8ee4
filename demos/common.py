"""What both demos share (:mod:`demos.real.pipeline`, :mod:`demos.toy.pipeline`): running their declared stages
through the stage runner (``trainer/core/stages.py``), the thread setting, writing the results at the end, and the
SCOPE training plot of both reports."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any, Callable

from eval_hooks.vocab import MIST_CONDITIONS as CONDS


def set_threads(n: int | None) -> None:
    """torch intra-op threads for every stage of the demo (None: torch's default)."""
    if n:
        import torch

        torch.set_num_threads(n)


class DemoRun:
    """One demo run into ``cfg.out``: its stages run by name through the stage runner, with the recipes' ``run``
    functions (``runners``) and ``compose`` handed down by the entry point (``recipes/demo.py``)."""

    def __init__(self, cfg, *, compose: Callable[[str, list[str]], Any], runners: dict[str, Callable],
                 threads: int | None):
        from trainer.core.stages import StageRunner

        self.cfg = cfg
        self.out = Path(cfg.out).expanduser().resolve()
        self.runner = StageRunner(self.out, seed=cfg.seed, compose=compose, runners=runners, prefix="[demo]")
        set_threads(threads)

    def run(self, stages: list, summarise: Callable[[dict[str, Any]], dict]) -> dict:
        """Compose every stage's config (a bad override fails before anything runs), then run the stages;
        returns ``summarise(results)`` with the stage and wall times."""
        t_start = time.time()
        self.runner.check(stages)
        if (self.out / "stages").exists():
            shutil.rmtree(self.out / "stages")  # a demo run always starts from scratch (seeds make it repeatable)
        (self.out / "stages").mkdir(parents=True)
        summary = summarise(self.runner.run_all(stages))
        summary["stage_seconds"] = self.runner.timings
        summary["wall_seconds"] = round(time.time() - t_start, 1)
        return summary

    def finish(self, summary: dict, write_report: Callable[[dict, Path], None],
               print_table: Callable[[dict], None]) -> dict:
        """Write ``<out>/summary.json`` and the report (``report.md`` and plots), print the table; return ``summary``."""
        from eval_hooks.io import write_json_atomic

        write_json_atomic(self.out / "summary.json", summary)
        write_report(summary, self.out)
        print_table(summary)
        print(f"[demo] done in {summary['wall_seconds']:.0f} s: {self.out / 'report.md'}, {self.out / 'summary.json'}",
              flush=True)
        return summary


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
