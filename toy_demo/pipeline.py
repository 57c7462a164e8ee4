"""The demo's orchestration: reproduce the SCOPE effect (and a Box2 stage) from scratch on a laptop CPU.

Run it with ``python recipes/demo.py demo=toy`` (the entry point; ``conf/demo.yaml``, schema
:class:`toy_demo.config.DemoRunConfig`). This module is orchestration only: every stage is a real recipe
(``recipes/sft.py``, ``evaluate.py``, ``mine_pairs.py``, ``dpo.py``, ``grpo.py``) run in-process on a
config composed from ``conf/`` plus the per-stage overrides in ``conf/demo.yaml``; every number comes
from ``eval_hooks``. The training stages go through the chain runner of ``recipes/chain.py``
(``trainer/core/stages.py``): each trains in ``<out>/stages/<name>/`` and starts from the ``final/`` weights
of the stage it names. (Recipes are imported only by the demo and the chain runner, to avoid paying
Python/torch start-up per stage.) Every data path is ``toy:<seed>/<file>``, the toy task's data source
(:mod:`toy_demo.task`).

Stages: tiny model -> SFT on a toy key->digit mix whose hints are always right (a hint follower) ->
matched evaluation -> pair mining from the base's own outputs -> SCOPE balanced DPO -> evaluation
on held-out keys -> misleading-only DPO (Standard-DPO ablation) -> evaluation -> Box2: five-condition
evaluation of the base, counterfactual SFT on bad workflows, a short GRPO run, evaluation again.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from omegaconf import DictConfig

from recipes.chain import compose

from . import task
from .common import finish, set_threads


class Pipeline:
    def __init__(self, cfg: DictConfig):
        self.cfg = cfg
        self.out = Path(cfg.out).expanduser().resolve()
        self.stages = self.out / "stages"
        self.seed = cfg.seed
        self.toy = f"{task.SCHEME}:{cfg.seed}"
        self.timings: dict[str, float] = {}
        from recipes import evaluate, mine_pairs
        from recipes.chain import stage_runner

        self.recipes = {"evaluate": evaluate, "mine_pairs": mine_pairs}

        self.runner = stage_runner(self.out, seed=self.seed, common=["trainer.resume=none", "eval=none", "logger=jsonl"],
                                   log=self._log)

    def _log(self, msg: str) -> None:
        print(f"[demo] {msg}", flush=True)

    def train(self, script: str, name: str, overrides: list[str], extra: list[str], start: str | None = None) -> Path:
        """Train stage ``name`` (``recipes/<script>.py``) from stage ``start``'s final/ weights (None: model.path)."""
        from omegaconf import OmegaConf

        from trainer.config import StageConfig

        t0 = time.time()
        stage = OmegaConf.structured(StageConfig(script=script, overrides=list(overrides), extra=extra))
        final = self.runner.run(name, stage, start)
        self.timings[name] = round(time.time() - t0, 1)
        if final is None:
            from trainer.core.stages import exit_stopped

            exit_stopped(f"[demo] stage {name} stopped early (its checkpoint is saved); run the same command "
                         f"again to continue")
        return final

    def evaluate(self, name: str, model_path: Path, items: str, family: str, adapter: Path | None = None,
                 knowledge: str | None = None) -> dict:
        """Evaluate; ``knowledge`` (MIST, with ``knowledge_aware``): ``"estimate"`` writes this model's own
        knowledge.jsonl (the base), a stage name splits the metrics by that stage's estimate."""
        t0 = time.time()
        over = [*self.cfg.stages.evaluate, f"model.path={model_path}", f"eval.path={self.toy}/{items}",
                f"eval.family={family}", f"out_dir={self.stages / name}", f"seed={self.seed}", "eval.max_rows=null"]
        if adapter is not None:
            over.append(f"adapter_path={adapter}")
        if knowledge is not None and self.cfg.knowledge_aware:
            over += ([*self.cfg.stages.knowledge, "knowledge.enabled=true"] if knowledge == "estimate" else
                     [f"eval.knowledge_path={self.stages / knowledge / 'knowledge.jsonl'}"])
        metrics = self.recipes["evaluate"].run(compose("evaluate", over))
        self.timings[name] = round(time.time() - t0, 1)
        return metrics

    def evaluate_arm(self, summary: dict, arm: str, name: str, base: Path, adapter: Path) -> None:
        """``summary[scope|scope_unseen][arm]``: the adapter on held-out and on unseen keys."""
        summary["scope"][arm] = self.evaluate(name, base, "mist_heldout.jsonl", "mist", adapter, knowledge="eval_base")
        summary["scope_unseen"][arm] = self.evaluate(f"{name}_unseen", base, "mist_unseen.jsonl", "mist", adapter,
                                                     knowledge="eval_base_unseen")

    def knowledge_aware(self, summary: dict, base: Path) -> None:
        """Mine train + untaught keys with the knowledge estimate, train algo=scope_knowledge_aware, evaluate."""
        st = self.cfg.stages
        t0 = time.time()
        mine_dir = self.stages / "mine_knowledge"
        stats = self.recipes["mine_pairs"].run(compose("mine_pairs", [
            *st.mine, *st.knowledge, "knowledge.enabled=true", f"model.path={base}",
            f"items_path={self.toy}/mist_train_knowledge.jsonl", f"out_dir={mine_dir}", f"seed={self.seed}"]))
        self.timings["mine_knowledge"] = round(time.time() - t0, 1)
        summary["mining_knowledge"] = {k: v for k, v in stats.items() if k != "dropped_items"}
        summary["mining_knowledge"]["knowledge"] = {k: v for k, v in stats["knowledge"].items()
                                                    if k != "unknown_dropped_items"}
        ka = self.train("dpo", "knowledge_aware", [*st.dpo, *st.knowledge_aware],
                        [f"data.train_path={mine_dir / 'pairs.jsonl'}", "algo=scope_knowledge_aware"], start="base_sft")
        self.evaluate_arm(summary, "knowledge_aware", "eval_knowledge_aware", base, ka)

    def run(self) -> dict:
        from eval_hooks.models import ensure_tiny_model

        cfg, st = self.cfg, self.cfg.stages
        t_start = time.time()
        if self.stages.exists():
            shutil.rmtree(self.stages)  # a demo run always starts from scratch (seeds make it repeatable)
        self.stages.mkdir(parents=True)
        summary: dict = {"seed": self.seed, "scope": {}, "scope_unseen": {}, "box2": {}}

        # 1-2. tiny model, then SFT on the always-right-hints mix -> a hint-following base
        init = ensure_tiny_model(st.model)
        base = self.train("sft", "base_sft", st.base_sft, [f"model.path={init}",
                                                           f"data.train_path={self.toy}/sft_mix.jsonl"])
        # 3. matched evaluation of the base (held-out keys; unseen keys measure context use)
        summary["scope"]["base"] = self.evaluate("eval_base", base, "mist_heldout.jsonl", "mist", knowledge="estimate")
        summary["scope_unseen"]["base"] = self.evaluate("eval_base_unseen", base, "mist_unseen.jsonl", "mist",
                                                        knowledge="estimate")
        # 4. pair mining from the base's own outputs
        t0 = time.time()
        mine_dir = self.stages / "mine"
        stats = self.recipes["mine_pairs"].run(compose("mine_pairs", [
            *st.mine, f"model.path={base}", f"items_path={self.toy}/mist_train.jsonl", f"out_dir={mine_dir}",
            f"seed={self.seed}"]))
        self.timings["mine"] = round(time.time() - t0, 1)
        summary["mining"] = {k: v for k, v in stats.items() if k != "dropped_items"}
        if not stats["kept"]:
            raise SystemExit("[demo] mining kept no pairs: the base never followed a misleading hint")
        pairs = mine_dir / "pairs.jsonl"
        # 5-6. SCOPE balanced DPO, evaluation on held-out and unseen keys
        scope = self.train("dpo", "scope", st.dpo, [f"data.train_path={pairs}", "algo=scope"], start="base_sft")
        self.evaluate_arm(summary, "trained", "eval_scope", base, scope)
        # 7. the Standard-DPO ablation: the same pairs, misleading contexts only
        if cfg.misleading_only:
            mo = self.train("dpo", "misleading_only", st.dpo, [f"data.train_path={pairs}", "algo=standard_dpo"],
                            start="base_sft")
            self.evaluate_arm(summary, "misleading_only", "eval_misleading_only", base, mo)
        # 7b. knowledge-aware SCOPE: quartets from known train keys + unknown_correct from the untaught keys
        if cfg.knowledge_aware:
            self.knowledge_aware(summary, base)
        # 8. Box2: base -> counterfactual SFT on bad workflows -> short GRPO
        if cfg.box2:
            summary["box2"]["base"] = self.evaluate("box2_eval_base", base, "box2_heldout.jsonl", "box2")
            cf = self.train("sft", "box2_sft", st.box2_sft, [f"data.train_path={self.toy}/box2_sft.jsonl"],
                            start="base_sft")
            summary["box2"]["sft"] = self.evaluate("box2_eval_sft", cf, "box2_heldout.jsonl", "box2")
            rl = self.train("grpo", "grpo", st.grpo, [f"data.train_path={self.toy}/grpo_prompts.jsonl"],
                            start="box2_sft")
            summary["box2"]["grpo"] = self.evaluate("box2_eval_grpo", cf, "box2_heldout.jsonl", "box2", rl)
        summary["stage_seconds"] = self.timings
        summary["wall_seconds"] = round(time.time() - t_start, 1)
        return summary


def run(cfg: DictConfig) -> dict:
    """Run every stage of ``cfg`` (a composed ``conf/demo.yaml``); write ``summary.json``, ``report.md``
    and the plots into ``cfg.out``, print the table; return the summary."""
    from trainer.data.sources import register_data_source

    from .report import print_table, write_demo_report

    # the demo's own source, also when the package metadata (its entry point) is not installed
    register_data_source(task.SCHEME, task.resolve_source)
    set_threads(cfg.torch_threads)
    pipeline = Pipeline(cfg)
    return finish(pipeline.out, pipeline.run(), write_demo_report, print_table)
