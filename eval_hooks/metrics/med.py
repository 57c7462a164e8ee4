"""MedCounterfact metrics (docs/medcounterfact.md#metrics): EA rate and Uncertain rate by category × prompt variant.

A row's condition is ``<category>/<variant>``. ``correct`` means the parsed label equals the item's
*original* expert label (evidence agreement, EA); for counterfactual categories a higher EA rate is
not better: it means the substituted term was treated as a real treatment. The Uncertain rate is
the share of rows whose parsed label is ``Uncertain``. Unparsable rows count in the denominators
of both (neither agreeing nor uncertain).
"""

from __future__ import annotations

from typing import Any, Sequence

from ._common import check_rows, group_by_item, where
from ..vocab import MED_CATEGORIES as CATEGORIES, MED_VARIANTS as VARIANTS
UNCERTAIN = "Uncertain"


def split_condition(condition: str) -> tuple[str, str]:
    """``"toxic/skept_evd" -> ("toxic", "skept_evd")``; ValueError for anything else."""
    cat, sep, var = str(condition).partition("/")
    if not sep or cat not in CATEGORIES or var not in VARIANTS:
        raise ValueError(f"unknown MedCounterfact condition {condition!r}; accepted: <category>/<variant> "
                         f"with category in {', '.join(CATEGORIES)} and variant in {', '.join(VARIANTS)}")
    return cat, var


def med_metrics(item_scores: Sequence[dict]) -> dict[str, Any]:
    """The Med part of ``metrics.json``.

    Keys: ``ea_rate.<category>.<variant>``, ``uncertain_rate.<category>.<variant>``,
    ``n.<category>.<variant>`` (rows), ``unparsed.<category>.<variant>`` and ``n_items``. Only
    category/variant pairs that occur are present; categories and variants keep the order of CATEGORIES and VARIANTS.
    """
    check_rows(item_scores, "med")
    cells: dict[tuple[str, str], list[tuple[bool, bool, bool]]] = {}
    for i, row in enumerate(item_scores):
        try:
            cat, var = split_condition(row["condition"])
        except ValueError as e:
            raise ValueError(f"med: {where(i, row)}: {e}") from None
        for f, v in (("category", cat), ("variant", var)):
            if row.get(f) is not None and row[f] != v:
                raise ValueError(f"med: {where(i, row)} has {f}={row[f]!r} but condition {row['condition']!r}")
        cells.setdefault((cat, var), []).append(
            (bool(row["correct"]), row.get("parsed") == UNCERTAIN, not row.get("parse_ok", True)))
    items = group_by_item(item_scores, "med")

    out: dict[str, Any] = {"ea_rate": {}, "uncertain_rate": {}, "n": {}, "unparsed": {}}
    for cat in CATEGORIES:
        for var in VARIANTS:
            vals = cells.get((cat, var))
            if not vals:
                continue
            n = len(vals)
            out["ea_rate"].setdefault(cat, {})[var] = sum(v[0] for v in vals) / n
            out["uncertain_rate"].setdefault(cat, {})[var] = sum(v[1] for v in vals) / n
            out["n"].setdefault(cat, {})[var] = n
            out["unparsed"].setdefault(cat, {})[var] = sum(v[2] for v in vals)
    out["n_items"] = len(items)
    return out
