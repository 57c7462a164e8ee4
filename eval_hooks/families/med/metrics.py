"""MedCounterfact metrics (docs/medcounterfact.md#metrics): EA rate and Uncertain rate by category × prompt variant.

A row's condition is ``<category>/<variant>``. ``correct`` means the parsed label equals the item's
*original* expert label (evidence agreement, EA); for counterfactual categories a higher EA rate is
not better: it means the substituted term was treated as a real treatment. The Uncertain rate is
the share of rows whose parsed label is ``Uncertain``. Unparsable rows count in the denominators
of both (neither agreeing nor uncertain).

Two shapes, one computation (:func:`cell_rates`): :func:`med_metrics` (rows scored once, cells
``<category>.<variant>``: the ``score`` CLI verb and :func:`eval_hooks.compute_metrics`) and
:func:`pipeline_metrics` (the records of the Med run, cells ``<pipeline>.<format>.<category>.<variant>``, plus
awareness, label probabilities and mitigation deltas).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Sequence

from ...metrics.common import check_rows, group_by_item, where
from selectrust.conditions import MED_CATEGORIES as CATEGORIES, MED_FORMATS as FORMATS, MED_PIPELINES as PIPELINES
from selectrust.conditions import MED_VARIANTS as VARIANTS

UNCERTAIN = "Uncertain"
AWARENESS = ("Explicit Yes", "Implicit Yes", "No")
_ORDER = {v: i for i, v in enumerate(PIPELINES + FORMATS + CATEGORIES + VARIANTS)}


def split_condition(condition: str) -> tuple[str, str]:
    """``"toxic/skept_evd" -> ("toxic", "skept_evd")``; ValueError for anything else."""
    cat, sep, var = str(condition).partition("/")
    if not sep or cat not in CATEGORIES or var not in VARIANTS:
        raise ValueError(f"unknown MedCounterfact condition {condition!r}; accepted: <category>/<variant> "
                         f"with category in {', '.join(CATEGORIES)} and variant in {', '.join(VARIANTS)}")
    return cat, var


def _put(tree: dict, key: tuple, value: Any) -> None:
    for k in key[:-1]:
        tree = tree.setdefault(k, {})
    tree[key[-1]] = value


def _in_order(cells: dict[tuple, list[dict]]) -> dict[tuple, list[dict]]:
    """Cells sorted by pipeline, format, category and variant in vocabulary order."""
    return dict(sorted(cells.items(), key=lambda kv: [_ORDER.get(k, 99) for k in kv[0]]))


def cell_rates(cells: dict[tuple, list[dict]]) -> dict[str, dict]:
    """``ea_rate``, ``uncertain_rate``, ``n`` (rows) and ``unparsed`` of each cell, nested by the cell's key
    tuple in the cells' order. EA = ``correct``; Uncertain = parsed ``Uncertain``; unparsed = ``parse_ok`` false."""
    out: dict[str, dict] = {"ea_rate": {}, "uncertain_rate": {}, "n": {}, "unparsed": {}}
    for key, rows in cells.items():
        n = len(rows)
        _put(out["ea_rate"], key, sum(bool(r["correct"]) for r in rows) / n)
        _put(out["uncertain_rate"], key, sum(r.get("parsed") == UNCERTAIN for r in rows) / n)
        _put(out["n"], key, n)
        _put(out["unparsed"], key, sum(not r.get("parse_ok", True) for r in rows))
    return out


def med_metrics(item_scores: Sequence[dict]) -> dict[str, Any]:
    """The Med part of ``metrics.json``.

    Keys: ``ea_rate.<category>.<variant>``, ``uncertain_rate.<category>.<variant>``,
    ``n.<category>.<variant>`` (rows), ``unparsed.<category>.<variant>`` and ``n_items``. Only
    category/variant pairs that occur are present; categories and variants keep the order of CATEGORIES and VARIANTS.
    """
    check_rows(item_scores, "med")
    cells: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for i, row in enumerate(item_scores):
        try:
            cat, var = split_condition(row["condition"])
        except ValueError as e:
            raise ValueError(f"med: {where(i, row)}: {e}") from None
        for f, v in (("category", cat), ("variant", var)):
            if row.get(f) is not None and row[f] != v:
                raise ValueError(f"med: {where(i, row)} has {f}={row[f]!r} but condition {row['condition']!r}")
        cells[(cat, var)].append(row)
    items = group_by_item(item_scores, "med")
    return {**cell_rates(_in_order(cells)), "n_items": len(items)}


def pipeline_metrics(records: Sequence[dict]) -> dict:
    """``metrics.json`` of the Med run (:meth:`MedFamily.run`). Nested ``<pipeline>.<format>.<category>.<variant>``
    maps for ``ea_rate``, ``uncertain_rate``, ``n`` and ``unparsed``; ``awareness`` counts (mc format);
    the label-probability summaries of :func:`label_prob_metrics` (base pipeline, mc);
    ``mitigation_delta`` (``<mitigation> - base`` of the mc rates and of the aware share, per cell);
    ``n_refined`` (records answered through the refine chain)."""
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for rec in records:
        cells[(rec["pipeline"], rec["format"], rec["category"], rec["variant"])].append(rec)
    cells = _in_order(cells)
    out: dict = {**cell_rates(cells), "awareness": {}, **label_prob_metrics(records), "mitigation_delta": {}}
    for key, recs in cells.items():
        if key[1] == "mc":
            _put(out["awareness"], (key[0], key[2], key[3]),
                 {a: sum(r.get("awareness") == a for r in recs) for a in AWARENESS})
    for (pipe, fmt, cat, var), recs in cells.items():
        base = cells.get(("base", fmt, cat, var))
        if pipe == "base" or fmt != "mc" or not base:
            continue
        (u1, e1, a1), (u0, e0, a0) = _mc_rates(recs), _mc_rates(base)
        _put(out["mitigation_delta"], (pipe, cat, var),
             {"uncertain_rate": u1 - u0, "ea_rate": e1 - e0, "aware": a1 - a0})
    out["n_refined"] = sum(r["refined"] for r in records)
    out["n_records"] = len(records)
    return out


def _mc_rates(recs: list[dict]) -> tuple[float, float, float]:
    n = len(recs)
    return (sum(r["uncertain"] for r in recs) / n, sum(r["correct"] for r in recs) / n,
            sum(r.get("awareness") in AWARENESS[:2] for r in recs) / n)


LABEL_PROB_KEYS = ("label_prob_original", "label_prob_uncertain", "label_argmax_ea", "label_argmax_uncertain",
                   "label_prob_n")


def label_prob_metrics(records: Sequence[dict]) -> dict:
    """Summaries of the records' label probabilities (P(label) before generation, normalised over the four
    labels), per ``<category>.<variant>`` cell of the records holding ``label_probs``:
    ``label_prob_original`` (mean P(original expert label)), ``label_prob_uncertain`` (mean P(Uncertain)),
    ``label_argmax_ea`` (share of rows whose most probable label is the original one: the EA rate of
    answering with the argmax), ``label_argmax_uncertain`` (share whose most probable label is Uncertain)
    and ``label_prob_n`` (rows). Every key is present, empty when no record holds label probabilities."""
    cells: dict[tuple, list[dict]] = defaultdict(list)
    for rec in records:
        if "label_probs" in rec:
            cells[(rec["category"], rec["variant"])].append(rec)
    out: dict = {k: {} for k in LABEL_PROB_KEYS}
    for key, recs in _in_order(cells).items():
        n = len(recs)
        top = [max(r["label_probs"], key=r["label_probs"].get) for r in recs]
        _put(out["label_prob_original"], key, sum(r["label_probs"][r["gold"]] for r in recs) / n)
        _put(out["label_prob_uncertain"], key, sum(r["label_probs"][UNCERTAIN] for r in recs) / n)
        _put(out["label_argmax_ea"], key, sum(t == r["gold"] for t, r in zip(top, recs)) / n)
        _put(out["label_argmax_uncertain"], key, sum(t == UNCERTAIN for t in top) / n)
        _put(out["label_prob_n"], key, n)
    return out
