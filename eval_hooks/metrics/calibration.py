"""How well a per-item score predicts a binary outcome: ROC AUC and a calibration table.

Pure functions (numpy only), e.g. a knowledge estimate's score against the model's clean correctness
(:func:`eval_hooks.knowledge.knowledge_quality`).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


def _as_arrays(scores: Sequence[float], outcomes: Sequence[bool]) -> tuple[np.ndarray, np.ndarray]:
    s = np.asarray(scores, dtype=float)
    y = np.asarray(outcomes)
    if s.ndim != 1 or s.shape != y.shape:
        raise ValueError(f"scores and outcomes must be two lists of the same length, got {s.shape} and {y.shape}")
    if not np.all(np.isfinite(s)):
        raise ValueError("scores must be finite numbers")
    if y.size and not np.all((y == 0) | (y == 1)):
        raise ValueError("outcomes must be true/false (or 1/0)")
    return s, y.astype(bool)


def roc_auc(scores: Sequence[float], outcomes: Sequence[bool]) -> float | None:
    """The area under the ROC curve of ``scores`` for the binary ``outcomes``: the probability that a random
    positive item scores above a random negative one, a tie counting one half (the Mann-Whitney U statistic over
    ``n_pos * n_neg``; the trapezoidal area of the ROC curve, ties included). 1 = the score separates the outcomes
    perfectly, 0.5 = no better than chance (a constant score gives exactly 0.5). ``None`` when either outcome is
    absent."""
    s, y = _as_arrays(scores, outcomes)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        return None
    order = np.argsort(s, kind="mergesort")
    ranks = np.empty(len(s), dtype=float)
    sorted_s = s[order]
    i = 0
    while i < len(s):  # average 1-based ranks over runs of equal scores
        j = i
        while j + 1 < len(s) and sorted_s[j + 1] == sorted_s[i]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2.0 + 1.0
        i = j + 1
    u = ranks[y].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def calibration_table(scores: Sequence[float], outcomes: Sequence[bool], *, n_bins: int = 5) -> list[dict]:
    """``n_bins`` equal-width bins of a score in [0, 1]: ``[lo, hi)``, the last one ``[lo, 1]``. Each bin:
    ``{"lo", "hi", "count", "mean_score", "accuracy"}`` (the share of positive outcomes; ``mean_score`` and
    ``accuracy`` are ``None`` for an empty bin). A calibrated score has ``accuracy`` close to ``mean_score``."""
    s, y = _as_arrays(scores, outcomes)
    if n_bins < 1:
        raise ValueError(f"n_bins must be >= 1, got {n_bins}")
    if s.size and (s.min() < 0 or s.max() > 1):
        raise ValueError(f"a calibration table needs scores in [0, 1], got [{s.min()}, {s.max()}]")
    edges = [b / n_bins for b in range(n_bins + 1)]  # the bounds reported: a score equal to lo is in that bin
    idx = np.minimum(np.searchsorted(edges, s, side="right") - 1, n_bins - 1)
    table = []
    for b in range(n_bins):
        m = idx == b
        n = int(m.sum())
        table.append({"lo": edges[b], "hi": edges[b + 1], "count": n,
                      "mean_score": float(s[m].mean()) if n else None, "accuracy": float(y[m].mean()) if n else None})
    return table


def expected_calibration_error(table: Sequence[dict]) -> float | None:
    """The count-weighted mean of ``|accuracy - mean_score|`` over the bins of a :func:`calibration_table`
    (``None`` for an empty table)."""
    total = sum(b["count"] for b in table)
    if not total:
        return None
    return float(sum(b["count"] * abs(b["accuracy"] - b["mean_score"]) for b in table if b["count"]) / total)
