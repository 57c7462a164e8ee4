"""SCOPE's OPSD baseline on the toy MIST task (``python recipes/distill.py recipe=opsd_tiny``; docs/scope.md#opsd).

``data.source=toy_mist``: stage ``base`` is the demo's base SFT (``pipeline.base_model`` and
``pipeline.base_sft`` = conf/demo.yaml ``stages.model`` / ``stages.base_sft``, on ``toy:<seed>/sft_mix.jsonl``,
with the demo's ``eval=none logger=jsonl``), so the base is the one ``recipes/demo.py`` trains at the same seed.
Stage ``opsd`` is a ``recipes/distill.py`` run on ``toy:<seed>/mist_train.jsonl`` with
``data.prompt_style=mist`` (student: an item's misleading prompt; teacher: the adapter-disabled base on
its clean prompt; on-policy tokens). Then the matched 4-condition MIST evaluation
(``recipes/evaluate.py``, composed with ``pipeline.evaluate``) of the base and of the student on each of
``pipeline.eval_sets``, and ``summary.json`` / ``report.md``.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from eval_hooks.vocab import MIST_CONDITIONS as CONDITIONS

from .distill_pipeline import DistillPipeline

# The base-stage overrides the demo's stage runner adds to every stage (recipes/demo.py ``common``), less
# ``trainer.resume=none`` (which only matters for a resumed run: here a re-run resumes or skips a finished base).
DEMO_COMMON = ["eval=none", "logger=jsonl"]


class OpsdPipeline(DistillPipeline):
    def __init__(self, cfg, *, compose, runners: dict[str, Callable], evaluate: Callable[[Any], dict],
                 overrides: list[str] | None = None):
        super().__init__(cfg, compose=compose, runners=runners, overrides=overrides)
        self.evaluate_run = evaluate

    def run(self) -> dict:
        from eval_hooks.io import write_json_atomic
        from eval_hooks.models import ensure_tiny_model

        from .config import validate_distill

        t_start = time.time()
        cfg = self.cfg
        validate_distill(cfg)
        toy = f"toy:{cfg.seed}"
        init = ensure_tiny_model(cfg.pipeline.base_model)
        base = self._stage("base", "sft", [*cfg.pipeline.base_sft, *DEMO_COMMON, f"model.path={init}",
                                           f"data.train_path={toy}/sft_mix.jsonl"], None)
        student = self._stage("opsd", "distill", [*self.overrides, *cfg.pipeline.stage1, "data.source=files",
                                                  f"data.train_path={toy}/mist_train.jsonl", "data.eval_path=null",
                                                  "algo.stage=kl"], "base")
        summary: dict[str, Any] = {"seed": cfg.seed}
        for items in cfg.pipeline.eval_sets:
            split = items.removesuffix(".jsonl")
            summary[split] = {"base": self.mist_eval(f"base_{split}", base, f"{toy}/{items}"),
                              "opsd": self.mist_eval(f"opsd_{split}", base, f"{toy}/{items}", adapter=student)}
        first = cfg.pipeline.eval_sets[0].removesuffix(".jsonl")
        summary.update(base=summary[first]["base"], opsd=summary[first]["opsd"])  # the headline split
        summary["stage_seconds"] = self.timings
        summary["wall_seconds"] = round(time.time() - t_start, 1)
        write_json_atomic(self.root / "summary.json", summary)
        (self.root / "report.md").write_text(opsd_report(summary, cfg.pipeline.eval_sets))
        print(opsd_report(summary, cfg.pipeline.eval_sets), flush=True)
        return summary

    def mist_eval(self, name: str, model_path, items: str, adapter=None) -> dict:
        """The demo's matched MIST evaluation (``recipes/evaluate.py``) in ``<run_dir>/eval/<name>``: the
        per-condition accuracies, ``overall``, ``sc2w`` (lower is better) and ``n_items``."""
        t0 = time.time()
        over = [*self.cfg.pipeline.evaluate, f"model.path='{model_path}'", f"eval.path={items}", "eval.family=mist",
                f"out_dir='{self.root / 'eval' / name}'", f"seed={self.cfg.seed}", "eval.max_rows=null"]
        if adapter is not None:
            over.append(f"adapter_path='{adapter}'")
        metrics = self.evaluate_run(self.compose("evaluate", over))
        self.timings[f"eval_{name}"] = round(time.time() - t0, 1)
        return {**{c: metrics["accuracy"][c] for c in CONDITIONS}, "overall": metrics["overall"],
                "sc2w": metrics["sc2w"], "n_items": metrics["n_items"]}


def opsd_report(summary: dict, eval_sets) -> str:
    cols = [*CONDITIONS, "overall", "sc2w"]
    lines = ["# OPSD (on-policy self-distillation) on the toy MIST task", "",
             f"Seed {summary['seed']}; SC2W: share of clean-correct items answered wrong under the misleading "
             "context (lower is better).", ""]
    for items in eval_sets:
        split = items.removesuffix(".jsonl")
        lines += [f"## {split}", "", "| model | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
        for arm in ("base", "opsd"):
            m = summary[split][arm]
            lines.append(f"| {arm} | " + " | ".join("n/a" if m[c] is None else f"{m[c]:.3f}" for c in cols) + " |")
        lines.append("")
    lines += [f"Wall seconds: {summary['wall_seconds']}; stages: {summary['stage_seconds']}", ""]
    return "\n".join(lines)
