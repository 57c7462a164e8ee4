"""Metrics: pure functions from item-level scores (the lines of ``item_scores.jsonl``) to the
content of ``metrics.json``. They know nothing about models; numpy only.

Each family's metrics live with the family (``eval_hooks/families/<name>/metrics.py``, e.g.
:mod:`eval_hooks.families.mist.metrics` with ``sc2w``, ``slice_metrics``, ``repair_analysis``); the
helpers they share are in :mod:`eval_hooks.metrics.common`. ``compute_metrics`` and ``headline`` ask
the family registry. All rates are fractions in [0, 1]; undefined rates are ``None`` (JSON null).
"""

from __future__ import annotations

from typing import Any, Sequence

__all__ = ["compute_metrics", "headline"]


def compute_metrics(family: str, item_scores: Sequence[dict], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """``metrics.json`` for one run of ``family`` (any registered family: ``mist | box2 | taste | med``, ...).

    ``n_boot``/``seed`` set the paired item bootstrap (MIST CIs; ``n_boot=0`` skips it); the result
    is a deterministic function of ``item_scores`` and ``seed``. Every family also gets ``family``.
    Raises ValueError naming the item-score line and field on malformed input, or the unknown family.
    """
    from ..families import get_family

    return {"family": family, **get_family(family).metrics(item_scores, n_boot=n_boot, seed=seed)}


def headline(family: str, metrics: dict[str, Any]) -> dict[str, float | int | None]:
    """The headline numbers of a ``metrics.json`` as a flat ``{"a.b": value}`` dict, in a fixed
    order: what trainers log per epoch and :func:`eval_hooks.report.compare_table` shows."""
    from ..families import get_family

    return get_family(family).headline(metrics)
