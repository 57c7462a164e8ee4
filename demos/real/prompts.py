"""The GRPO prompts of the real demo's ``scope_grpo`` arm (stage ``grpo_prompts``, :mod:`demos.real.arms`): training
rows drawn balanced over the items the base knows and does not know, by the ``mine`` stage's knowledge estimate."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from selectrust.conditions import CORRECT, IRRELEVANT, MISLEADING
import random
from selectrust.core.io import read_records, write_jsonl_atomic
from eval_hooks.knowledge import read_estimates

TRAIN = "facts/facts_train.jsonl"  # the training facts (stage ``facts``)
#: split (``real.split``) -> summary key -> (the evaluation stages' name prefix, the facts file they evaluate on). The
#: dev stages have names of their own, so one run dir can hold both: settings chosen on ``real.split=dev``, then the
#: same command with ``real.split=test`` reuses every training stage and adds the test evaluations.
EVAL_SETS = {
    "test": {"real": ("eval", "facts/facts_heldout.jsonl"), "transfer": ("transfer", "facts/facts_transfer.jsonl")},
    "dev": {"real": ("dev_eval", "facts/facts_dev.jsonl"),
            "transfer": ("dev_transfer", "facts/facts_transfer_dev.jsonl")},
}
GRPO_PROMPTS = "prompts.jsonl"  # in stages/grpo_prompts/
#: The declared inputs of stage ``grpo_prompts`` (name -> earlier stage/path; the runner hands their paths down).
INPUTS = {"rows": TRAIN, "labels": "mine/knowledge.jsonl"}


def _items_by_label(rows: list[dict], labels: dict[str, str]) -> dict[str, list[str]]:
    """The rows' items (sorted) per knowledge label: ``{"known": [...], "unknown": [...], "uncertain": [...]}``."""
    items = sorted({r["item_id"] for r in rows})
    return {lab: [i for i in items if labels.get(i) == lab] for lab in ("known", "unknown", "uncertain")}


def balanced_by_knowledge(rows: list[dict], labels: dict[str, str], *, seed: int) -> tuple[list[dict], dict]:
    """The rows (every condition) of as many items the model knows as items it does not know (``labels``:
    item -> known | unknown | uncertain; the larger side drawn at random with ``seed``; uncertain items left out),
    and the counts ``{"known", "unknown", "uncertain", "per_label"}``. Raises SystemExit when either side is empty."""
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
INFORMATIVE = {"known": (MISLEADING, IRRELEVANT), "unknown": (CORRECT,)}


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


def grpo_prompts(seed: int, rows_mode: str = "all") -> Callable[[Path, dict[str, Path]], dict]:
    """Stage ``grpo_prompts``: the GRPO prompt file (``prompts.jsonl``: MIST rows) of the training items, balanced
    over the items the base knows and does not know. A step of two declared inputs (:data:`INPUTS`, handed down by
    the stage runner): ``rows``, the training facts, and ``labels``, the ``mine`` stage's knowledge estimate of
    them. ``rows_mode="all"``, every condition of as many known as unknown items (:func:`balanced_by_knowledge`);
    ``"informative"``, only the rows whose reward can vary (:func:`informative_by_knowledge`). Returns the counts
    (the summary's)."""
    draw = GRPO_ROWS[rows_mode][0]

    def step(out: Path, inputs: dict[str, Path]) -> dict:
        rows = [rec for _, rec in read_records(inputs["rows"])]
        labels = {i: e["knowledge"] for i, e in read_estimates(inputs["labels"]).items()}
        kept, counts = draw(rows, labels, seed=seed)
        out.mkdir(parents=True, exist_ok=True)
        write_jsonl_atomic(out / GRPO_PROMPTS, kept)
        return {**counts, "rows": len(kept)}

    return step
