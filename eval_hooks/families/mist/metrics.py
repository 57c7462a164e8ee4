"""MIST metrics (SCOPE paper, docs/scope.md#metrics): accuracy per condition, Overall, SC2W, paired bootstrap CIs,
slices and repair analysis.

Notation: ``a[i, r] = 1[parsed answer of item i under condition r == gold_i]``, stored as a boolean
matrix of shape ``(n_items, 4)`` with columns in :data:`MIST_CONDITIONS` order.

- ``Acc_r = mean_i a[i, r]``; ``Overall = mean_r Acc_r``.
- ``situated_faithfulness = (Acc_correct + Acc_misleading) / 2`` (CR-DPO's SF, higher is better; issue 60): reported
  beside SC2W so the numbers compare with the literature.
- ``SC2W = #{i: a[i,clean]=1 and a[i,mis]=0} / #{i: a[i,clean]=1}`` (lower is better). Items wrong
  when clean are in neither numerator nor denominator. **When no item is clean-correct the ratio is
  undefined and we return ``None`` (JSON ``null``)**, not 0: a model that never answers correctly
  has not shown it resists anything. Inside the bootstrap such resamples are NaN and are dropped.
- CIs: paired item-level percentile bootstrap. Items are resampled with replacement and each item
  keeps its 4 rows together, so the between-condition correlation is preserved (docs/scope.md#metrics).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from ...metrics.common import (CI_LEVEL, bootstrap_indices, check_rows, group_by_item, percentile_ci,
                      require_complete, slice_key)
from selectrust.conditions import MIST_CONDITIONS
CLEAN, MIS = 0, 1
CORRECT_COL = MIST_CONDITIONS.index("correct")
# Row attributes that compute_metrics slices by when rows carry them (any other: slice_metrics).
DEFAULT_SLICE_KEYS = ("answer_type", "source", "topic", "relation", "channel", "plausibility", "provenance")
MAX_DEFAULT_SLICES = 20


# -- the matrix -----------------------------------------------------------------------------
def mist_items(item_scores: Sequence[dict]) -> dict[Any, dict[str, dict]]:
    """Validate and group: ``{item_id: {condition: row}}``; every item has exactly the 4 conditions."""
    check_rows(item_scores, "mist")
    items = group_by_item(item_scores, "mist", MIST_CONDITIONS)
    require_complete(items, MIST_CONDITIONS, "mist")
    for item_id, rows in items.items():
        golds = {c: rows[c].get("gold") for c in MIST_CONDITIONS}
        if len({repr(g) for g in golds.values()}) > 1:
            raise ValueError(f"mist: item {item_id!r} has different gold answers across its conditions "
                             f"({golds}); an item's 4 rows must share gold")
    return items


def correctness_matrix(items: dict[Any, dict[str, dict]]) -> np.ndarray:
    """``(n_items, 4)`` bool matrix ``a[i, r]`` in item order and :data:`MIST_CONDITIONS` order."""
    return np.array([[bool(rows[c]["correct"]) for c in MIST_CONDITIONS] for rows in items.values()],
                    dtype=bool).reshape(len(items), len(MIST_CONDITIONS))


def matrix_stats(a: np.ndarray) -> dict[str, np.ndarray]:
    """Accuracy, Overall and SC2W of ``a`` with shape ``(..., n_items, 4)``; leading axes (bootstrap
    replicates) are kept. Returns ``accuracy (..., 4)``, ``overall (...)``, ``sc2w (...)`` with NaN
    where SC2W is undefined (no clean-correct item)."""
    acc = a.mean(axis=-2)
    clean, mis = a[..., CLEAN], a[..., MIS]
    num = (clean & ~mis).sum(axis=-1)
    den = clean.sum(axis=-1)
    with np.errstate(invalid="ignore", divide="ignore"):
        sc2w = np.where(den > 0, num / np.maximum(den, 1), np.nan)
    # situated faithfulness (CR-DPO; issue 60): the mean of the accuracy under the correct and the misleading context
    sf = (acc[..., CORRECT_COL] + acc[..., MIS]) / 2.0
    return {"accuracy": acc, "overall": acc.mean(axis=-1), "sc2w": sc2w, "situated_faithfulness": sf}


def _nan_to_none(x: float) -> float | None:
    return None if np.isnan(x) else float(x)


# -- public metric functions ---------------------------------------------------------------------
def accuracy_by_condition(item_scores: Sequence[dict]) -> dict[str, float]:
    """``{condition: Acc_r}`` over the 4 MIST conditions (fractions in [0, 1])."""
    stats = matrix_stats(correctness_matrix(mist_items(item_scores)))
    return {c: float(v) for c, v in zip(MIST_CONDITIONS, stats["accuracy"])}


def sc2w(item_scores: Sequence[dict]) -> float | None:
    """Switch-to-wrong rate; ``None`` when no item is clean-correct (see module docstring)."""
    return _nan_to_none(matrix_stats(correctness_matrix(mist_items(item_scores)))["sc2w"])


def bootstrap_ci(a: np.ndarray, *, n_boot: int = 1000, seed: int = 0,
                 level: float = CI_LEVEL) -> dict[str, Any]:
    """Paired item-level bootstrap CIs of accuracy per condition, Overall and SC2W.

    ``a``: ``(n_items, 4)`` bool. Rows of ``a`` (items) are resampled with replacement ``n_boot``
    times from ``numpy.random.default_rng(seed)``; the same resampled items serve every statistic.
    Returns ``{"accuracy": {cond: [lo, hi]}, "overall": [lo, hi], "sc2w": [lo, hi] | None}``.
    """
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    reps = matrix_stats(a[bootstrap_indices(a.shape[0], n_boot, seed)])  # (n_boot, n_items, 4)
    return {
        "accuracy": {c: percentile_ci(reps["accuracy"][:, j], level) for j, c in enumerate(MIST_CONDITIONS)},
        "overall": percentile_ci(reps["overall"], level),
        "sc2w": percentile_ci(reps["sc2w"], level),
        "situated_faithfulness": percentile_ci(reps["situated_faithfulness"], level),
    }


MIN_CLEAN_CORRECT = 30       # fewer clean-correct items: SC2W rests on too few items to say much
MAX_COMPLIANCE_DROP = 0.20   # a larger drop of format compliance against a baseline: the format broke, not the knowledge


def answer_format(item_scores: Sequence[dict]) -> dict[str, dict[str, Any]]:
    """Per condition: ``no_answer`` (rows with no answer at all), ``hedged`` (rows offering two candidates as
    alternatives, row field ``answer_status``: no committed answer either, counted apart), ``multiple`` (rows naming
    two or more candidates together, "X and Y" or a list: counted apart the same way), ``outside_candidates``
    (an answer that is none of the row's known candidates) and ``format_compliance`` (the fraction of rows that
    commit to an answer, 1 - (no_answer + hedged + multiple) / rows)."""
    n = {c: 0 for c in MIST_CONDITIONS}
    none = {c: 0 for c in MIST_CONDITIONS}
    hedged = {c: 0 for c in MIST_CONDITIONS}
    multiple = {c: 0 for c in MIST_CONDITIONS}
    outside = {c: 0 for c in MIST_CONDITIONS}
    for row in item_scores:
        c = row["condition"]
        n[c] += 1
        status = row.get("answer_status")
        hedged[c] += status == "hedged"
        multiple[c] += status == "multiple"
        none[c] += not row.get("parse_ok", True) and status not in ("hedged", "multiple")
        outside[c] += status == "outside"
    return {"no_answer": none, "hedged": hedged, "multiple": multiple, "outside_candidates": outside,
            "format_compliance": {c: (1.0 - (none[c] + hedged[c] + multiple[c]) / n[c]) if n[c] else None
                                  for c in MIST_CONDITIONS}}


def quality_warnings(metrics: dict, baseline: dict | None = None) -> list[str]:
    """Warnings about what a MIST result can support: fewer than :data:`MIN_CLEAN_CORRECT` clean-correct items
    (SC2W's denominator), and, against a ``baseline`` evaluation's metrics, a format-compliance drop of more than
    :data:`MAX_COMPLIANCE_DROP` in any condition."""
    out = []
    ncc = metrics.get("n_clean_correct")
    if ncc is not None and ncc < MIN_CLEAN_CORRECT:
        out.append(f"n_clean_correct={ncc} < {MIN_CLEAN_CORRECT}: SC2W rests on too few clean-correct items")
    base_fc = (baseline or {}).get("format_compliance") or {}
    for c, v in (metrics.get("format_compliance") or {}).items():
        b = base_fc.get(c)
        if v is not None and b is not None and b - v > MAX_COMPLIANCE_DROP:
            out.append(f"format_compliance.{c} fell from {b:.2f} (baseline) to {v:.2f}: more than "
                       f"{MAX_COMPLIANCE_DROP * 100:.0f} points; accuracy changes may be format failures")
    return out


def unparsed_counts(item_scores: Sequence[dict]) -> dict[str, int]:
    """Rows whose response had no parsable final answer (``parse_ok`` false: no answer, or a hedge), per
    condition."""
    counts = {c: 0 for c in MIST_CONDITIONS}
    for row in item_scores:
        if not row.get("parse_ok", True):
            counts[row["condition"]] += 1
    return counts


def _summary(a: np.ndarray, *, n_boot: int, seed: int) -> dict[str, Any]:
    stats = matrix_stats(a)
    out: dict[str, Any] = {
        "accuracy": {c: float(v) for c, v in zip(MIST_CONDITIONS, stats["accuracy"])},
        "overall": float(stats["overall"]),
        "sc2w": _nan_to_none(float(stats["sc2w"])),
        "situated_faithfulness": _nan_to_none(float(stats["situated_faithfulness"])),
        "n_items": int(a.shape[0]),
        "n_clean_correct": int(a[:, CLEAN].sum()),
    }
    if n_boot > 0:
        out["ci"] = bootstrap_ci(a, n_boot=n_boot, seed=seed)
    return out


def item_attribute(rows: dict[str, dict], by: str, from_condition: str = "misleading") -> Any:
    """The value of attribute ``by`` for one item: taken from its ``from_condition`` row, or, where
    that row lacks it (or has null), from the first other row that has it, in condition order."""
    order = (from_condition, *[c for c in MIST_CONDITIONS if c != from_condition])
    for c in order:
        v = rows[c].get(by)
        if v is not None:
            return v
    return None


def slice_metrics(item_scores: Sequence[dict], by: str, *, from_condition: str = "misleading",
                  n_boot: int = 0, seed: int = 0) -> dict[str, dict[str, Any]]:
    """MIST metrics per value of the row attribute ``by`` (e.g. ``"channel"``, ``"provenance"``).

    An item belongs to one slice: the value its ``from_condition`` row carries (the misleading row
    by default, since channel and plausibility describe the misleading signal), falling back to the
    item's other rows; items without the attribute go to the slice ``"<missing>"``. Each slice gets
    the same keys as the whole run (``accuracy``, ``overall``, ``sc2w``, ``n_items``, and ``ci``
    when ``n_boot > 0``). Slices are sorted by key.
    """
    if from_condition not in MIST_CONDITIONS:
        raise ValueError(f"from_condition must be one of {', '.join(MIST_CONDITIONS)}, got {from_condition!r}")
    items = mist_items(item_scores)
    a = correctness_matrix(items)
    keys = [slice_key(item_attribute(rows, by, from_condition)) for rows in items.values()]
    out = {}
    for value in sorted(set(keys)):
        mask = np.array([k == value for k in keys])
        out[value] = _summary(a[mask], n_boot=n_boot, seed=seed)
    return out


def repair_analysis(base_scores: Sequence[dict], new_scores: Sequence[dict]) -> dict[str, Any]:
    """Misleading failures of a base run repaired by a new run on the same items.

    A *failure* is an item answered correctly when clean and wrongly under the misleading context
    (the SC2W numerator). ``repaired`` = base failures whose misleading row the new run answers
    correctly; ``newly_broken`` = new-run failures that were not base failures; ``net`` = repaired
    minus newly broken (paper: SCOPE repaired 188 of Qwen3-4B's 331 failures, net 182).
    ``persisting`` = failures of both; the remaining base failures are ones the new run now gets
    wrong in both conditions (``now_wrong_clean``). Item ids are listed in base-run order.
    """
    base, new = mist_items(base_scores), mist_items(new_scores)
    missing, extra = [i for i in base if i not in new], [i for i in new if i not in base]
    if missing or extra:
        raise ValueError(f"repair_analysis: the two runs must cover the same items; only in base: "
                         f"{missing[:5]}{'...' if len(missing) > 5 else ''}, only in new: "
                         f"{extra[:5]}{'...' if len(extra) > 5 else ''}")

    def failed(rows: dict[str, dict]) -> bool:
        return bool(rows["clean"]["correct"]) and not rows["misleading"]["correct"]

    base_fail = [i for i in base if failed(base[i])]
    repaired = [i for i in base_fail if new[i]["misleading"]["correct"]]
    persisting = [i for i in base_fail if failed(new[i])]
    now_wrong_clean = [i for i in base_fail if i not in set(repaired) | set(persisting)]
    newly_broken = [i for i in base if failed(new[i]) and not failed(base[i])]
    return {
        "n_items": len(base),
        "base_failures": len(base_fail),
        "new_failures": len(persisting) + len(newly_broken),
        "repaired": len(repaired),
        "newly_broken": len(newly_broken),
        "net": len(repaired) - len(newly_broken),
        "persisting": len(persisting),
        "now_wrong_clean": len(now_wrong_clean),
        "repaired_ids": repaired,
        "newly_broken_ids": newly_broken,
        "persisting_ids": persisting,
        "now_wrong_clean_ids": now_wrong_clean,
    }


def mist_metrics(item_scores: Sequence[dict], *, n_boot: int = 1000, seed: int = 0,
                 slice_by: Sequence[str] | None = None) -> dict[str, Any]:
    """The MIST part of ``metrics.json``.

    Keys: ``accuracy.{clean,misleading,correct,irrelevant}``, ``overall``, ``sc2w``, ``n_items``,
    ``n_clean_correct``, ``ci`` (same nesting, ``[lo, hi]`` 95% paired-bootstrap intervals; absent
    when ``n_boot == 0``), ``bootstrap`` (settings), ``unparsed.<condition>`` (counts: no answer or hedged),
    ``no_answer.<condition>``, ``hedged.<condition>``, ``multiple.<condition>``, ``outside_candidates.<condition>``,
    ``format_compliance.<condition>``
    (:func:`answer_format`), ``warnings`` (:func:`quality_warnings`, without a baseline) and
    ``slices.<attribute>.<value>`` (same keys per slice, no CIs); with knowledge-labelled rows also
    ``by_knowledge`` and ``unknown_correct_accuracy`` (:func:`knowledge_split`). ``slice_by`` defaults to those of
    :data:`DEFAULT_SLICE_KEYS` that at least one row carries with at most
    :data:`MAX_DEFAULT_SLICES` distinct values (item-level free text such as a provenance note
    would give one slice per item); an explicit ``slice_by`` is used as given.
    """
    items = mist_items(item_scores)
    a = correctness_matrix(items)
    out = _summary(a, n_boot=n_boot, seed=seed)
    if n_boot > 0:
        out["bootstrap"] = {"n_boot": n_boot, "seed": seed, "level": CI_LEVEL, "method": "paired item percentile"}
    out["unparsed"] = unparsed_counts(item_scores)
    out.update(answer_format(item_scores))
    out["warnings"] = quality_warnings(out)
    slices = {by: slice_metrics(item_scores, by) for by in (slice_by or [])}
    if slice_by is None:
        for by in DEFAULT_SLICE_KEYS:
            if any(row.get(by) is not None for row in item_scores):
                s = slice_metrics(item_scores, by)
                if len(s) <= MAX_DEFAULT_SLICES:  # free-text attributes (one value per item) say nothing
                    slices[by] = s
    out["slices"] = slices
    if any(row.get("knowledge") is not None for row in item_scores):
        out.update(knowledge_split(item_scores))
    return out


def knowledge_split(item_scores: Sequence[dict]) -> dict[str, Any]:
    """Rows labelled with the evaluated model's knowledge estimate (row attribute ``knowledge``:
    known | unknown | uncertain, ``eval_hooks.knowledge``) -> ``by_knowledge.<label>`` with every MIST
    statistic of :func:`_summary` (no CIs) per label, and the headline ``unknown_correct_accuracy``:
    correct-context accuracy on the unknown items (``None`` when there are none), i.e. whether the model
    uses a reliable context where it has no knowledge of its own."""
    by = slice_metrics(item_scores, "knowledge", from_condition="clean")
    unknown = by.get("unknown")
    return {"by_knowledge": by, "unknown_correct_accuracy": None if unknown is None else unknown["accuracy"]["correct"]}
