"""Metrics: pure functions from item-level scores (the lines of ``item_scores.jsonl``) to the
content of ``metrics.json``. They know nothing about models; numpy only.

``compute_metrics(family, item_scores)`` dispatches to the family module; the modules also expose
the individual pieces (``sc2w``, ``slice_metrics``, ``repair_analysis``, ``pair_stats``, ...).
All rates are fractions in [0, 1]; undefined rates are ``None`` (JSON null).
"""

from __future__ import annotations

from typing import Any, Sequence

from .box2 import box2_metrics
from .med import med_metrics
from .mist import (MIST_CONDITIONS, accuracy_by_condition, bootstrap_ci, mist_metrics, repair_analysis,
                   sc2w, slice_metrics, unparsed_counts)
from .taste import pair_stats, taste_metrics

FAMILIES = ("mist", "box2", "taste", "med")

__all__ = [
    "FAMILIES", "MIST_CONDITIONS", "accuracy_by_condition", "bootstrap_ci", "box2_metrics", "compute_metrics",
    "headline", "med_metrics", "mist_metrics", "pair_stats", "repair_analysis", "sc2w", "slice_metrics",
    "taste_metrics", "unparsed_counts",
]


def compute_metrics(family: str, item_scores: Sequence[dict], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """``metrics.json`` for one run of ``family`` (``mist | box2 | taste | med``).

    ``n_boot``/``seed`` set the paired item bootstrap (MIST CIs; ``n_boot=0`` skips it); the result
    is a deterministic function of ``item_scores`` and ``seed``. Every family also gets ``family``.
    Raises ValueError naming the item-score line and field on malformed input.
    """
    if family == "mist":
        out = mist_metrics(item_scores, n_boot=n_boot, seed=seed)
    elif family == "box2":
        out = box2_metrics(item_scores)
    elif family == "taste":
        out = taste_metrics(item_scores)
    elif family == "med":
        out = med_metrics(item_scores)
    else:
        raise ValueError(f"unknown family {family!r}; accepted: {', '.join(FAMILIES)}")
    return {"family": family, **out}


def headline(family: str, metrics: dict[str, Any]) -> dict[str, float | int | None]:
    """The headline numbers of a ``metrics.json`` as a flat ``{"a.b": value}`` dict, in a fixed
    order: what trainers log per epoch and :func:`eval_hooks.report.compare_table` shows."""
    flat: dict[str, Any] = {}
    if family == "mist":
        flat.update({f"accuracy.{c}": metrics["accuracy"][c] for c in MIST_CONDITIONS})
        flat["overall"] = metrics["overall"]
        flat["sc2w"] = metrics["sc2w"]
    elif family == "box2":
        flat.update({f"score.{k}": v for k, v in metrics["score"].items()})
        flat.update({f"delta.{k}": v for k, v in metrics["delta"].items()})
    elif family == "taste":
        for k in ("seeded", "reversed", "strict", "mean", "average"):
            flat[k] = metrics[k]
        flat.update({f"per_cell.{c}.strict": v["strict"] for c, v in metrics["per_cell"].items()})
        flat.update({f"paired_outcomes.{k}": v for k, v in metrics["paired_outcomes"].items()})
    elif family == "med":
        for rate in ("ea_rate", "uncertain_rate"):
            for cat, per_var in metrics[rate].items():
                flat.update({f"{rate}.{cat}.{var}": v for var, v in per_var.items()})
    else:
        raise ValueError(f"unknown family {family!r}; accepted: {', '.join(FAMILIES)}")
    return flat
