"""The toy demo: reproduce the SCOPE effect (and a Box2 stage) from scratch on a laptop CPU.

Run it with ``python recipes/demo.py demo=toy`` (the entry point; ``conf/demo.yaml``, schema
:class:`demos.config.DemoRunConfig`). A declared list of stages (:func:`stages`) run by the stage runner
(``recipes/stages/``), like a chain: every stage is a real recipe, named (``sft``, ``evaluate``,
``mine_pairs``, ``dpo``, ``grpo``) and run in-process on a config composed from ``conf/`` plus the per-stage
overrides in ``conf/demo.yaml``; every number comes from ``eval_hooks``. Each stage runs in
``<out>/stages/<name>/``; a training stage starts from the ``final/`` weights of the stage it names. Every data
path is ``toy:<seed>/<file>``, the toy task's data source (:mod:`demos.toy.task`).

Stages: tiny model -> SFT on a toy key->digit mix whose hints are always right (a hint follower) ->
matched evaluation -> pair mining from the base's own outputs -> SCOPE balanced DPO -> evaluation
on held-out keys -> misleading-only DPO (Standard-DPO ablation) -> evaluation -> Box2: five-condition
evaluation of the base, counterfactual SFT on bad workflows, a short GRPO run, evaluation again.
"""

from __future__ import annotations

from typing import Any


from trainer.runtime.stage import Stage

from ..common import DemoRun
from ..config import DemoRunConfig
from . import task
from selectrust.model import ensure_tiny_model
from selectrust.core.data_sources import register_data_source
from .report import print_table, write_demo_report

TRAIN_COMMON = ["eval=none", "logger=jsonl"]  # every training stage
SECTION = "toy"  # the conf/demo.yaml section it reads; a demo of this section (demos.config.DEMOS) runs here
RECIPES = ("sft", "dpo", "grpo", "evaluate", "mine_pairs")  # the recipes the stages name


def mined_pairs(stats: dict) -> None:
    if not stats["kept"]:
        raise SystemExit("[demo] mining kept no pairs: the base never followed a misleading hint")


class ToyStages:
    """The toy demo's stages for ``cfg``, declared in run order by :meth:`all`."""

    def __init__(self, cfg: DemoRunConfig, init: str):
        self.cfg, self.st, self.init = cfg, cfg.toy.stages, init
        self.toy = f"{task.SCHEME}:{cfg.seed}"

    def train(self, recipe: str, name: str, overrides, extra: list[str], start: str | None = "base_sft") -> Stage:
        """Train stage ``name`` (``recipes/<recipe>.py``) from stage ``start``'s final/ weights (None: model.path)."""
        return Stage(name, recipe, [*overrides, *TRAIN_COMMON, *extra], start=start)

    def evaluate(self, name: str, model: str, items: str, family: str, adapter: str | None = None,
                 knowledge: str | None = None) -> Stage:
        """Evaluate stage ``model``'s weights (with stage ``adapter``'s); ``knowledge`` (MIST, with
        ``knowledge_aware``): ``"estimate"`` writes this model's own knowledge.jsonl (the base), a stage name
        splits the metrics by that stage's estimate."""
        over = [*self.st.evaluate, f"eval.path={self.toy}/{items}", f"eval.family={family}", "eval.max_rows=null"]
        inputs = {"model.path": model, **({"adapter_path": adapter} if adapter else {})}
        if knowledge == "estimate" and self.cfg.toy.knowledge_aware:
            over += [*self.st.knowledge, "knowledge.enabled=true"]
        elif knowledge is not None and self.cfg.toy.knowledge_aware:
            inputs["eval.knowledge_path"] = f"{knowledge}/knowledge.jsonl"
        return Stage(name, "evaluate", over, inputs=inputs)

    def evaluate_arm(self, arm: str) -> list[Stage]:
        """The adapter of stage ``arm`` on held-out and on unseen keys."""
        return [self.evaluate(f"eval_{arm}", "base_sft", "mist_heldout.jsonl", "mist", arm, knowledge="eval_base"),
                self.evaluate(f"eval_{arm}_unseen", "base_sft", "mist_unseen.jsonl", "mist", arm,
                              knowledge="eval_base_unseen")]

    def mine(self, name: str, items: str, knowledge: bool = False) -> Stage:
        over = [*self.st.mine, *([*self.st.knowledge, "knowledge.enabled=true"] if knowledge else []),
                f"items_path={self.toy}/{items}"]
        return Stage(name, "mine_pairs", over, inputs={"model.path": "base_sft"}, check=None if knowledge else mined_pairs)

    def all(self) -> list[Stage]:
        cfg, st, toy = self.cfg, self.st, self.toy
        # 1-2. tiny model, then SFT on the always-right-hints mix -> a hint-following base
        out = [self.train("sft", "base_sft", st.base_sft, [f"model.path={self.init}",
                                                           f"data.train_path={toy}/sft_mix.jsonl"], start=None),
               # 3. matched evaluation of the base (held-out keys; unseen keys measure context use)
               self.evaluate("eval_base", "base_sft", "mist_heldout.jsonl", "mist", knowledge="estimate"),
               self.evaluate("eval_base_unseen", "base_sft", "mist_unseen.jsonl", "mist", knowledge="estimate"),
               # 4. pair mining from the base's own outputs
               self.mine("mine", "mist_train.jsonl")]
        pairs = {"data.train_path": "mine/pairs.jsonl"}
        # 5-6. SCOPE balanced DPO, evaluation on held-out and unseen keys
        out += [Stage("scope", "dpo", [*st.dpo, *TRAIN_COMMON, "algo=scope"], inputs=pairs, start="base_sft"),
                *self.evaluate_arm("scope")]
        # 7. the Standard-DPO ablation: the same pairs, misleading contexts only
        if cfg.toy.misleading_only:
            out += [Stage("misleading_only", "dpo", [*st.dpo, *TRAIN_COMMON, "algo=standard_dpo"], inputs=pairs,
                          start="base_sft"), *self.evaluate_arm("misleading_only")]
        # 7b. knowledge-aware SCOPE: quartets from known train keys + unknown_correct from the untaught keys
        if cfg.toy.knowledge_aware:
            out += [self.mine("mine_knowledge", "mist_train_knowledge.jsonl", knowledge=True),
                    Stage("knowledge_aware", "dpo", [*st.dpo, *st.knowledge_aware, *TRAIN_COMMON,
                                                     "algo=scope_knowledge_aware"],
                          inputs={"data.train_path": "mine_knowledge/pairs.jsonl"}, start="base_sft"),
                    *self.evaluate_arm("knowledge_aware")]
        # 8. Box2: base -> counterfactual SFT on bad workflows -> short GRPO
        if cfg.toy.box2:
            out += [self.evaluate("box2_eval_base", "base_sft", "box2_heldout.jsonl", "box2"),
                    self.train("sft", "box2_sft", st.box2_sft, [f"data.train_path={toy}/box2_sft.jsonl"]),
                    self.evaluate("box2_eval_sft", "box2_sft", "box2_heldout.jsonl", "box2"),
                    self.train("grpo", "grpo", st.grpo, [f"data.train_path={toy}/grpo_prompts.jsonl"], start="box2_sft"),
                    self.evaluate("box2_eval_grpo", "box2_sft", "box2_heldout.jsonl", "box2", adapter="grpo")]
        return out


def summary_of(cfg: DemoRunConfig, results: dict[str, Any]) -> dict:
    """``summary.json`` (less the timings) from the stages' results."""
    arms = {"trained": "scope", "misleading_only": "misleading_only", "knowledge_aware": "knowledge_aware"}
    summary: dict = {"seed": cfg.seed, "scope": {"base": results["eval_base"]},
                     "scope_unseen": {"base": results["eval_base_unseen"]}, "box2": {}}
    for key, arm in arms.items():
        if f"eval_{arm}" in results:
            summary["scope"][key], summary["scope_unseen"][key] = results[f"eval_{arm}"], results[f"eval_{arm}_unseen"]
    summary["box2"] = {k: results[f"box2_eval_{k}"] for k in ("base", "sft", "grpo") if f"box2_eval_{k}" in results}
    summary["mining"] = {k: v for k, v in results["mine"].items() if k != "dropped_items"}
    if "mine_knowledge" in results:
        stats = results["mine_knowledge"]
        summary["mining_knowledge"] = {k: v for k, v in stats.items() if k != "dropped_items"}
        summary["mining_knowledge"]["knowledge"] = {k: v for k, v in stats["knowledge"].items()
                                                    if k != "unknown_dropped_items"}
    return summary


def run(cfg: DemoRunConfig, *, compose, runners: dict, checks: dict, stage_runner) -> dict:
    """Run every stage of ``cfg`` (a composed ``conf/demo.yaml``) with the recipes ``runners`` (by name) and the stage
    runner (both handed down by ``recipes/demo.py``) in ``cfg.out`` (:class:`demos.common.DemoRun`: one run per out dir, continued by the
    same command); write ``summary.json``, ``report.md`` and the plots there, print the table; return the summary."""
    # the demo's own source, also when the package metadata (its entry point) is not installed
    register_data_source(task.SCHEME, task.resolve_source)
    demo = DemoRun(cfg, compose=compose, runners=runners, checks=checks, threads=cfg.toy.torch_threads,
                   stage_runner=stage_runner)
    return demo.run(ToyStages(cfg, str(ensure_tiny_model(cfg.toy.stages.model))).all(),
                    lambda results: summary_of(cfg, results), write_demo_report, print_table)
