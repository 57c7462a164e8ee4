"""The taste distillation pipeline behind ``python recipes/distill.py`` (``pipeline.kind=taste``, the default;
docs/taste.md#distillation-trainer).

``data.source=toy``: build the toy fork task (``eval_hooks/builders/taste_toy.py``) in ``<run_dir>/data``,
split it into two task-disjoint folds (fold 0 trains, fold 1 is held out), and SFT a demonstration
following base from the tiny preset (stage ``base``). Then stage ``stage1`` (``algo.stage=kl``) and,
unless ``pipeline.stage2`` is empty, stage ``stage2`` (calibration, from stage 1's adapter), each a
``recipes/distill_stage.py`` run in ``<run_dir>/stages/<name>/`` through :class:`recipes.stages.StageRunner`
(re-running the command skips finished stages and resumes an interrupted one). Finally (stage ``evaluate``,
in ``<run_dir>/eval/``) teacher and student are evaluated on the held-out fold and ``summary.json`` /
``report.md`` are written. The recipes are run by name (``sft``, ``distill``; ``evaluate`` for OPSD) from the
``runners`` that ``recipes/distill.py`` hands down.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

from selectrust.core.errors import ConfigError
from recipes.stages import StageRunner
from trainer.runtime.stage import Stage
from eval_hooks.builders.taste_toy import base_sft_mix, make_taste_toy
from eval_hooks.folds import split_task_folds
from selectrust.core.io import write_json_atomic, write_jsonl_atomic
from selectrust.model import ensure_tiny_model
from selectrust.core.io import write_json_atomic
from selectrust.model import load_tokenizer
from selectrust.generation.prompts import PromptSettings
from trainer.distill.views import load_fork_views
from selectrust.model import load_base_with_adapters

SUMMARY_KEYS = ("teacher.strict", "student.before.strict", "student.stage1.strict", "student.stage2.strict",
                "student.stage1.ece", "student.stage2.ece")


def _command_overrides() -> list[str]:
    """The command line's overrides for every distillation stage (without run dir and seed, which every stage
    gets from the runner, and without ``pipeline.*``, which only the pipeline reads)."""
    try:
        from hydra.core.hydra_config import HydraConfig

        task = list(HydraConfig.get().overrides.task)
    except ValueError:  # not under @hydra.main (a test calling pipeline() with a composed config)
        return []
    keys = [o.split("=", 1)[0].lstrip("+~") for o in task]
    return [o for o, k in zip(task, keys) if k not in ("trainer.run_dir", "seed") and not k.startswith("pipeline.")]


class DistillPipeline:
    def __init__(self, cfg, *, compose: Callable[[str, list[str]], Any], runners: dict[str, Callable],
                 overrides: list[str] | None = None):
        self.cfg, self.compose = cfg, compose
        self.root = Path(cfg.trainer.run_dir).expanduser().resolve()
        self.overrides = _command_overrides() if overrides is None else list(overrides)
        self.runner = StageRunner(self.root, seed=cfg.seed, compose=compose, runners=runners, prefix="[distill]")

    def prepare_toy(self) -> tuple[str, str, list[Stage]]:
        """Toy items, folds and the base SFT mix. Returns (train, heldout, [stage ``base``: SFT on the mix])."""
        data = self.root / "data"
        toy = make_taste_toy(self.cfg.seed, n_tasks=self.cfg.data.toy_tasks)
        write_jsonl_atomic(data / "items.jsonl", toy.items)
        folds = split_task_folds(list(enumerate(toy.items, start=1)), 2, self.cfg.seed, path=data / "items.jsonl")
        for i, fold in enumerate(folds):
            write_jsonl_atomic(data / f"fold_{i}.jsonl", fold)
        write_json_atomic(data / "toy.json", {"seed": toy.seed, "rule": toy.rule, "open_modes": toy.open_modes,
                                              "fold_sizes": [len(f) for f in folds]})
        write_jsonl_atomic(data / "base_sft.jsonl", base_sft_mix(self.cfg.seed))
        init = ensure_tiny_model(self.cfg.pipeline.base_model)
        base = Stage("base", "sft", [*self.cfg.pipeline.base_sft, f"model.path={init}",
                                     f"data.train_path={data / 'base_sft.jsonl'}"])
        return str(data / "fold_0.jsonl"), str(data / "fold_1.jsonl"), [base]

    def run(self) -> dict:
        t_start = time.time()
        cfg = self.cfg  # typed settings, validated by the entry point (recipes/distill.py: to_settings)
        if cfg.data.prompt_style == "mist":
            raise ConfigError("data.prompt_style=mist with pipeline.kind=taste: this pipeline evaluates taste forks; "
                              "for OPSD on MIST items use pipeline.kind=opsd (the toy: recipe=opsd_tiny), or run "
                              "recipes/distill.py as a `script: distill` stage of recipes/chain.py and evaluate with "
                              "recipes/evaluate.py")
        if cfg.data.source == "toy":
            train, heldout, stages = self.prepare_toy()
        else:
            train, heldout, stages = cfg.data.train_path, cfg.data.eval_path, []
        if not heldout:
            raise ConfigError("data.eval_path: the pipeline evaluates on a held-out fold; give one")
        common = [*self.overrides, "data.source=files", f"data.train_path={train}", f"data.eval_path={heldout}"]
        stages.append(Stage("stage1", "distill", [*common, *cfg.pipeline.stage1, "algo.stage=kl"],
                            start=stages[0].name if stages else None))
        if cfg.pipeline.stage2:
            stages.append(Stage("stage2", "distill", [*common, *cfg.pipeline.stage2], start="stage1"))
        stages.append(Stage("evaluate", call=lambda out: self.evaluate(heldout, out), dir="eval"))
        summary = self.runner.run_all(stages)["evaluate"]
        summary["stage_seconds"] = self.runner.timings
        summary["wall_seconds"] = round(time.time() - t_start, 1)
        write_json_atomic(self.root / "summary.json", summary)
        (self.root / "report.md").write_text(report_markdown(summary))
        print(report_markdown(summary), flush=True)
        return summary

    def evaluate(self, heldout: str, out: Path) -> dict:
        """Teacher (starting weights + demonstration) and student before / after each stage, on ``heldout``
        (``out/<model>/metrics.json``)."""
        from omegaconf import OmegaConf  # deferred: imports omegaconf


        from trainer.distill.evaluation import eval_settings, evaluate_views  # deferred: imports torch

        s1 = OmegaConf.load(self.root / "stages" / "stage1" / "config.yaml")
        a = s1.algo
        views = load_fork_views(heldout, style=s1.data.prompt_style, demonstration=a.demonstration)
        tokenizer = load_tokenizer(s1.model.path, trust_remote_code=s1.model.trust_remote_code)
        settings = PromptSettings.from_config(s1.prompt)
        kw = dict(settings=settings, **eval_settings(tokenizer, a), batch_size=self.cfg.pipeline.eval_batch_size,
                  seed=self.cfg.seed)
        adapters = {"before": [], "stage1": [str(self.root / "stages" / "stage1" / "final")]}
        if (self.root / "stages" / "stage2" / "final").exists():
            adapters["stage2"] = [*adapters["stage1"], str(self.root / "stages" / "stage2" / "final")]
        results: dict[str, dict] = {}
        for name, chain in [("teacher", []), *adapters.items()]:
            model = load_base_with_adapters(s1.model, chain, device=None)
            device = next(model.parameters()).device
            res = evaluate_views(model, tokenizer, views, teacher=name == "teacher", device=device, **kw)
            write_json_atomic(out / name / "metrics.json", {k: v for k, v in res.items()})
            results[name] = res
        flat: dict[str, Any] = {"teacher.strict": results["teacher"]["strict"],
                                "teacher.mean": results["teacher"]["mean"]}
        for name in adapters:
            for k in ("strict", "mean", "ece"):
                flat[f"student.{name}.{k}"] = results[name][k]
        flat["heldout_items"] = len(views) // 2
        return flat


def report_markdown(summary: dict) -> str:
    rows = [("teacher (with demonstration)", "teacher")] + [(f"student {n}", f"student.{n}")
                                                           for n in ("before", "stage1", "stage2")]
    lines = ["# Taste distillation: held-out fold", "", "| model | strict | mean | ECE |", "|---|---|---|---|"]
    for label, key in rows:
        if f"{key}.strict" in summary:
            ece = summary.get(f"{key}.ece")
            lines.append(f"| {label} | {summary[f'{key}.strict']:.3f} | {summary.get(f'{key}.mean', float('nan')):.3f} "
                         f"| {'' if ece is None else f'{ece:.3f}'} |")
    lines += ["", f"Held-out items: {summary.get('heldout_items')}; wall seconds: {summary.get('wall_seconds')}; "
              f"stages: {summary.get('stage_seconds')}", ""]
    return "\n".join(lines)
