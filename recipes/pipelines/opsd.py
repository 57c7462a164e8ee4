"""SCOPE's OPSD baseline as a pipeline (``pipeline.kind=opsd``; ``recipe=opsd_tiny``; docs/scope.md#opsd).

Stage ``base`` (only with ``pipeline.base_sft_path``): ``recipes/sft.py`` from the tiny preset
``pipeline.base_model`` with ``pipeline.base_sft`` (recipe=opsd_tiny: the demo's base SFT, conf/demo.yaml
``toy.stages.model`` / ``toy.stages.base_sft``, with the demo's ``eval=none logger=jsonl``, so the base is the one
``recipes/demo.py`` trains at the same seed); without it the student starts from ``model.path``. Stage
``opsd``: a ``recipes/distill_stage.py`` run on ``data.train_path`` with ``data.prompt_style=mist`` (student: an
item's misleading prompt; teacher: the adapter-disabled base on its clean prompt; on-policy tokens). Then
the matched 4-condition MIST evaluation (``recipes/evaluate.py``, composed with ``pipeline.evaluate``) of
the base and of the student on each file of ``pipeline.eval_sets``, and ``summary.json`` / ``report.md``.
Every data path comes from the config (files, ``hf:`` ids or registered data sources).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from selectrust.conditions import MIST_CONDITIONS as CONDITIONS

from trainer.runtime.stage import Stage
from recipes.pipelines.taste_distill import DistillPipeline
from selectrust.core.io import write_json_atomic
from selectrust.model import ensure_tiny_model

# The overrides the toy demo adds to every training stage (``TRAIN_COMMON`` of its stages).
DEMO_COMMON = ["eval=none", "logger=jsonl"]


class OpsdPipeline(DistillPipeline):
    def run(self) -> dict:
        t_start = time.time()
        cfg = self.cfg  # typed settings, validated by the entry point (recipes/distill.py: to_settings)
        stages, base = [], {"model.path": "base"}  # the student starts from stage base (or from model.path)
        if cfg.pipeline.base_sft_path:
            init = ensure_tiny_model(cfg.pipeline.base_model)
            stages.append(Stage("base", "sft", [*cfg.pipeline.base_sft, *DEMO_COMMON, f"model.path={init}",
                                                f"data.train_path={cfg.pipeline.base_sft_path}"]))
        else:
            base = {}
        stages.append(Stage("opsd", "distill", [*self.overrides, *cfg.pipeline.stage1, "data.source=files",
                                                f"data.train_path={cfg.data.train_path}", "data.eval_path=null",
                                                "algo.stage=kl"], start="base" if base else None))
        for items in cfg.pipeline.eval_sets:
            split = split_name(items)
            stages += [self.mist_eval(f"base_{split}", base, items),
                       self.mist_eval(f"opsd_{split}", base, items, adapter="opsd")]
        results = self.runner.run_all(stages)
        summary: dict[str, Any] = {"seed": cfg.seed}
        for items in cfg.pipeline.eval_sets:
            split = split_name(items)
            summary[split] = {arm: mist_metrics(results[f"eval_{arm}_{split}"]) for arm in ("base", "opsd")}
        first = split_name(cfg.pipeline.eval_sets[0])
        summary.update(base=summary[first]["base"], opsd=summary[first]["opsd"])  # the headline split
        summary["stage_seconds"] = self.runner.timings
        summary["wall_seconds"] = round(time.time() - t_start, 1)
        write_json_atomic(self.root / "summary.json", summary)
        (self.root / "report.md").write_text(opsd_report(summary, cfg.pipeline.eval_sets))
        print(opsd_report(summary, cfg.pipeline.eval_sets), flush=True)
        return summary

    def mist_eval(self, name: str, base: dict[str, str], items: str, adapter: str | None = None) -> Stage:
        """Stage ``eval_<name>``: the demo's matched MIST evaluation (``recipes/evaluate.py``) in
        ``<run_dir>/eval/<name>`` of stage base's weights (``base``; else ``model.path``) with stage ``adapter``'s."""
        over = [*self.cfg.pipeline.evaluate, f"eval.path={items}", "eval.family=mist", "eval.max_rows=null"]
        if not base:
            over.append(f"model.path='{Path(self.cfg.model.path)}'")
        return Stage(f"eval_{name}", "evaluate", over, inputs={**base, **({"adapter_path": adapter} if adapter else {})},
                     dir=f"eval/{name}")


def mist_metrics(metrics: dict) -> dict:
    """The per-condition accuracies, ``overall``, ``sc2w`` (lower is better) and ``n_items`` of an evaluation."""
    return {**{c: metrics["accuracy"][c] for c in CONDITIONS}, "overall": metrics["overall"],
            "sc2w": metrics["sc2w"], "n_items": metrics["n_items"]}


def split_name(items: str) -> str:
    """The summary key of an evaluated file: its name's stem (``.../mist_heldout.jsonl`` -> ``mist_heldout``)."""
    return Path(str(items)).stem


def opsd_report(summary: dict, eval_sets) -> str:
    cols = [*CONDITIONS, "overall", "sc2w"]
    lines = ["# OPSD (on-policy self-distillation) on MIST", "",
             f"Seed {summary['seed']}; SC2W: share of clean-correct items answered wrong under the misleading "
             "context (lower is better).", ""]
    for items in eval_sets:
        split = split_name(items)
        lines += [f"## {split}", "", "| model | " + " | ".join(cols) + " |", "|---" * (len(cols) + 1) + "|"]
        for arm in ("base", "opsd"):
            m = summary[split][arm]
            lines.append(f"| {arm} | " + " | ".join("n/a" if m[c] is None else f"{m[c]:.3f}" for c in cols) + " |")
        lines.append("")
    lines += [f"Wall seconds: {summary['wall_seconds']}; stages: {summary['stage_seconds']}", ""]
    return "\n".join(lines)
