"""Shared helpers for the metric modules: input checks, grouping rows into items, percentile CIs, and a Student-t
interval over a few values (e.g. one per training seed: :func:`t_interval`, and a statistic's spread over the
seeds: :func:`seed_spread`).

Item scores are the lines of ``item_scores.jsonl`` (see the evaluation contract): one dict per row
with at least ``row_id, item_id, condition, correct``. Error messages name the 1-based position of
the row in the list, which is its line number in ``item_scores.jsonl``.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable, Sequence

import numpy as np

CI_LEVEL = 0.95


def where(i: int, row: dict) -> str:
    """`item_scores[line 3] (row_id='q1/clean', item_id='q1')`: how errors point at a row."""
    return f"item_scores line {i + 1} (row_id={row.get('row_id')!r}, item_id={row.get('item_id')!r})"


def check_rows(item_scores: Sequence[dict], family: str, required: Iterable[str] = ()) -> None:
    """Raise ValueError unless ``item_scores`` is a non-empty list of dicts carrying
    ``item_id, condition, correct`` (bool) and every field in ``required``."""
    if isinstance(item_scores, (str, bytes, dict)) or not hasattr(item_scores, "__len__"):
        raise ValueError(f"{family}: item_scores must be a list of dicts, got {type(item_scores).__name__}")
    if len(item_scores) == 0:
        raise ValueError(f"{family}: no item scores to compute metrics from (empty list)")
    fields = ("item_id", "condition", "correct", *required)
    for i, row in enumerate(item_scores):
        if not isinstance(row, dict):
            raise ValueError(f"{family}: item_scores line {i + 1} is a {type(row).__name__}, expected a dict")
        for f in fields:
            if f not in row:
                raise ValueError(f"{family}: {where(i, row)} has no field {f!r} (required: {', '.join(fields)})")
        if not isinstance(row["correct"], (bool, np.bool_)):
            raise ValueError(f"{family}: {where(i, row)} field 'correct' must be true or false, "
                             f"got {row['correct']!r}")


def group_by_item(item_scores: Sequence[dict], family: str,
                  conditions: Sequence[str] | None = None) -> dict[Any, dict[str, dict]]:
    """``{item_id: {condition: row}}`` in first-seen item order. Rejects a condition seen twice for
    one item and, when ``conditions`` is given, any condition outside it."""
    items: dict[Any, dict[str, dict]] = {}
    for i, row in enumerate(item_scores):
        cond = row["condition"]
        if conditions is not None and cond not in conditions:
            raise ValueError(f"{family}: {where(i, row)} has condition {cond!r}; "
                             f"accepted: {', '.join(conditions)}")
        per_item = items.setdefault(row["item_id"], {})
        if cond in per_item:
            raise ValueError(f"{family}: {where(i, row)}: item {row['item_id']!r} has condition "
                             f"{cond!r} twice")
        per_item[cond] = row
    return items


def require_complete(items: dict[Any, dict[str, dict]], conditions: Sequence[str], family: str) -> None:
    """Every item must have exactly ``conditions`` (the matched design)."""
    for item_id, rows in items.items():
        missing = [c for c in conditions if c not in rows]
        if missing:
            raise ValueError(f"{family}: item {item_id!r} is missing condition(s) {', '.join(missing)}; "
                             f"every item needs all of {', '.join(conditions)}")


def rate(mask: np.ndarray) -> float | None:
    """Mean of a boolean vector as a float; ``None`` for an empty vector."""
    return float(np.mean(mask)) if mask.size else None


def percentile_ci(samples: np.ndarray, level: float = CI_LEVEL) -> list[float] | None:
    """Percentile interval ``[lo, hi]`` of bootstrap replicates (shape ``(n_boot,)``); replicates that
    are NaN (the statistic undefined in that resample) are dropped; ``None`` if none remain."""
    samples = samples[~np.isnan(samples)]
    if samples.size == 0:
        return None
    tail = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(samples, [tail, 100.0 - tail])
    return [float(lo), float(hi)]


def bootstrap_indices(n_items: int, n_boot: int, seed: int) -> np.ndarray:
    """``(n_boot, n_items)`` item indices drawn with replacement; a pure function of the seed."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, n_items, size=(n_boot, n_items))


def slice_key(value: Any) -> str:
    """JSON object keys are strings; ``None`` (attribute absent) becomes ``"<missing>"``."""
    return "<missing>" if value is None else str(value)


def _betacf(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz)."""
    tiny, c, d = 1e-300, 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 300):
        for num in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                    -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + num * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + num / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < 1e-15:
            break
    return h


def student_t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t with ``df`` degrees of freedom (through the regularized incomplete beta function;
    no scipy)."""
    x = df / (df + t * t)
    a, b = df / 2.0, 0.5
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    ibeta = front * _betacf(a, b, x) / a if x < (a + 1.0) / (a + b + 2.0) else 1.0 - front * _betacf(b, a, 1.0 - x) / b
    tail = 0.5 * ibeta  # P(T > |t|)
    return 1.0 - tail if t >= 0 else tail


def student_t_ppf(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on :func:`student_t_cdf`)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"p must be in (0, 1), got {p}")
    if p < 0.5:
        return -student_t_ppf(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while student_t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        lo, hi = (mid, hi) if student_t_cdf(mid, df) < p else (lo, mid)
    return (lo + hi) / 2.0


def t_interval(values: Sequence[float], level: float = CI_LEVEL) -> list[float] | None:
    """The Student-t interval ``[lo, hi]`` of the mean of ``values`` (treated as independent draws, e.g. one per
    training seed: mean +- t_{(1+level)/2, n-1} * sd / sqrt(n), sd with n - 1); None with fewer than two values."""
    v = np.asarray([x for x in values if x is not None and not math.isnan(x)], dtype=float)
    if v.size < 2:
        return None
    half = student_t_ppf((1.0 + level) / 2.0, v.size - 1) * float(v.std(ddof=1)) / math.sqrt(v.size)
    return [float(v.mean() - half), float(v.mean() + half)]


def nan_ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """``num / den`` elementwise, NaN where ``den`` is 0 (no warning)."""
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)


def finite_or_none(x) -> float | None:
    """``x`` as a float, None where it is NaN (a statistic with no items)."""
    return None if np.isnan(x) else float(x)


def seed_spread(by_seed: dict, level: float = CI_LEVEL, worst: Callable = min) -> dict[str, Any] | None:
    """The spread of one statistic over training seeds (``by_seed``: ``{seed: value}``; None and NaN dropped):
    ``{"by_seed", "min", "max", "worst_seed", "mean", "seed_ci"}``, ``worst_seed`` the seed ``worst`` (``min`` or
    ``max``) picks, ``seed_ci`` the Student-t interval of the mean (:func:`t_interval`; None with one seed); None
    when no seed has a value."""
    vals = {s: float(v) for s, v in sorted(by_seed.items()) if v is not None and not math.isnan(v)}
    if not vals:
        return None
    return {"by_seed": vals, "min": min(vals.values()), "max": max(vals.values()),
            "worst_seed": worst(vals, key=vals.get), "mean": float(np.mean(list(vals.values()))),
            "seed_ci": t_interval(list(vals.values()), level)}


def seed_stratified_sums(per_seed: dict, arms: Sequence[str], base: str, *, n_boot: int, boot_seed: int
                         ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Each arm's feature sums over every seed's items, ``(F,)``, and over ``n_boot`` bootstrap replicates,
    ``(n_boot, F)``: a replicate resamples each seed's items with replacement (stratified by seed) and pools them, and
    every arm shares the replicate's items (``base``'s rows give each seed's item count). ``per_seed``:
    ``{seed: {arm: (n_items, F) per-item features}}``, rows aligned by item across arms."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    rng = np.random.default_rng(boot_seed)
    point = {a: sum(per_seed[s][a].sum(axis=0) for s in per_seed) for a in arms}
    width = next(iter(per_seed.values()))[base].shape[1]
    boot = {a: np.zeros((n_boot, width)) for a in arms}
    for s in sorted(per_seed):
        n = len(per_seed[s][base])
        weights = rng.multinomial(n, np.full(n, 1.0 / n), size=n_boot)  # (n_boot, n): each item's draws
        for a in arms:
            boot[a] += weights @ per_seed[s][a]
    return point, boot
