"""Box2-Bench metrics (docs/box2.md#effects): condition scores, the four effects and recovery curves over k.

Conditions: ``none`` (S_0), ``good`` (S_G), ``bad`` (S_B), ``partial_<k>`` and ``mixed_<k>`` for
change points k. A score is the success rate (mean of ``correct``) over that condition's rows.

- ``S_P`` and ``S_M`` average the per-k scores with equal weight per change point (the paper's
  aggregate over k); with the same items at every k this equals the pooled success rate.
- ``Δuse = S_G − S_0``, ``Δbad = S_B − S_0``, ``Δstop = S_P − S_G``, ``Δswitch = S_M − S_P``, all
  from unrounded scores (the paper's −43.3 for 23/30 vs 10/30 is −13/30, not 76.7 − 33.3).
- A condition with no rows scores ``None``, and so does every effect that needs it.
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from ...metrics.common import check_rows, group_by_item, where
from selectrust.conditions import BOX2_CURVE_REGIMES as CURVE_REGIMES, BOX2_FIXED_REGIMES as FIXED_REGIMES, BOX2_REGIMES as REGIMES
_CURVE_RE = re.compile(r"^(partial|mixed)_(\d+)$")


def parse_condition(condition: str) -> tuple[str, int | None]:
    """``"mixed_4" -> ("mixed", 4)``, ``"good" -> ("good", None)``; ValueError otherwise."""
    if condition in FIXED_REGIMES:
        return condition, None
    m = _CURVE_RE.match(str(condition))
    if not m:
        raise ValueError(f"unknown Box2 condition {condition!r}; accepted: none, good, bad, "
                         f"partial_<k>, mixed_<k> (k a non-negative integer)")
    return m.group(1), int(m.group(2))


def _delta(x: float | None, y: float | None) -> float | None:
    return None if x is None or y is None else float(x - y)


def box2_metrics(item_scores: Sequence[dict]) -> dict[str, Any]:
    """The Box2 part of ``metrics.json``.

    Keys: ``score.{none,good,bad,partial,mixed}``, ``delta.{use,bad,stop,switch}``,
    ``recovery.{partial,mixed}`` = ``{str(k): score}`` sorted by k, ``n.<regime>`` (rows),
    ``n_items``, ``unparsed.<regime>`` (rows with ``parse_ok`` false).
    """
    check_rows(item_scores, "box2")
    cells: dict[tuple[str, int | None], list[bool]] = {}
    unparsed = {r: 0 for r in REGIMES}
    for i, row in enumerate(item_scores):
        try:
            regime, k = parse_condition(row["condition"])
        except ValueError as e:
            raise ValueError(f"box2: {where(i, row)}: {e}") from None
        if row.get("regime") is not None and row["regime"] != regime:
            raise ValueError(f"box2: {where(i, row)} has regime {row['regime']!r} but condition "
                             f"{row['condition']!r} (expected regime {regime!r})")
        if row.get("k") is not None and k is not None and int(row["k"]) != k:
            raise ValueError(f"box2: {where(i, row)} has k={row['k']!r} but condition {row['condition']!r}")
        cells.setdefault((regime, k), []).append(bool(row["correct"]))
        if not row.get("parse_ok", True):
            unparsed[regime] += 1
    items = group_by_item(item_scores, "box2")  # rejects a condition repeated within an item

    score: dict[str, float | None] = {}
    n: dict[str, int] = {}
    for regime in FIXED_REGIMES:
        vals = cells.get((regime, None), [])
        score[regime] = float(np.mean(vals)) if vals else None
        n[regime] = len(vals)
    recovery: dict[str, dict[str, float]] = {}
    for regime in CURVE_REGIMES:
        ks = sorted(k for (r, k) in cells if r == regime)
        recovery[regime] = {str(k): float(np.mean(cells[(regime, k)])) for k in ks}
        score[regime] = float(np.mean(list(recovery[regime].values()))) if ks else None
        n[regime] = sum(len(cells[(regime, k)]) for k in ks)
    delta = {
        "use": _delta(score["good"], score["none"]),
        "bad": _delta(score["bad"], score["none"]),
        "stop": _delta(score["partial"], score["good"]),
        "switch": _delta(score["mixed"], score["partial"]),
    }
    return {"score": score, "delta": delta, "recovery": recovery, "n": n, "n_items": len(items),
            "unparsed": unparsed}
