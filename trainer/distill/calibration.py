"""Calibration error of the choice probabilities (the ``ece`` of the distillation evaluation)."""

from __future__ import annotations

from typing import Sequence

__all__ = ["expected_calibration_error"]


def expected_calibration_error(confidence: Sequence[float], correct: Sequence[bool], bins: int = 10) -> float:
    """ECE with ``bins`` equal-width confidence bins: sum_b (n_b / N) |accuracy_b - mean confidence_b|."""
    n = len(confidence)
    if n == 0:
        return float("nan")
    total = 0.0
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        idx = [i for i, c in enumerate(confidence) if (lo < c <= hi) or (b == 0 and c == 0.0)]
        if idx:
            acc = sum(bool(correct[i]) for i in idx) / len(idx)
            conf = sum(confidence[i] for i in idx) / len(idx)
            total += len(idx) / n * abs(acc - conf)
    return total
