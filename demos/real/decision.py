"""The decision rule, written before any test run (issue 60, Deliver 3; docs/real_model.md#the-decision-rule): each
target of issue 61 judged on its **one-sided 95% bound**, with the point estimate beside it.

- **The bound that decides: a two-level bootstrap.** Each of ``n_boot`` replicates draws the seeds with replacement
  (as many as there are), then the items: when every seed evaluated the same items (the fixed split and the fixed
  NQ-Swap set, issue 60) one draw of the items is shared by every seed of the replicate (the items are crossed with
  the seeds, so an item, a question, is one cluster however many seeds evaluated it); otherwise each seed's items are
  drawn within the seed. Every arm and the base share the replicate's seeds and items (paired). The statistic is
  computed on the replicate's summed counts (as the pooled point is); the bound is its 5th percentile for an "at
  least" target, its 95th for an "at most" one. It carries both the training seed's variance and the items'.
- **Beside it, the seed-level t-bound**: the statistic on each seed, their mean -/+ t_{0.95, n-1} sd / sqrt(n) (the
  one-sided 95% Student-t bound; None with one seed). It is reported, never decides: with under 10 seeds it rests on
  few draws, and it leaves the items' variance out when the items are shared.
- A target **holds on the bound** when the two-level bound is on the target's side of its limit; **on the point
  only** when the pooled point is but the bound is not; **fails** when the point is not. A target whose evaluation or
  arm did not run is "not run". Format compliance is a minimum over every run, arm and condition (no interval).

``decide(runs, arm)`` returns ``{"rule", "n_boot", "boot_seed", "level", "seeds", "targets": [{"name", "set",
"limit", "side", "point", "bound", "t_bound", "holds": "bound" | "point only" | "fails" | "not run"}]}``; the pooled
table prints it (:func:`lines`) and ``pooled.json`` keeps it (``decision``).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import numpy as np

from eval_hooks.metrics.common import student_t_ppf
from selectrust.conditions import CLEAN, CORRECT, IRRELEVANT

from .arms import BASE
from .arms import label as arm_label
from .bootstrap import shared_items, two_level_sums
from .pooled import item_matrix, seed_features
from .prompts import EVAL_SETS
from .nq_swap import PREFIX
from .nq_swap import KEY as NQ
from .report import SETS
from eval_hooks.scoring.report_kit import md_table

LEVEL = 0.95  # one-sided
EPS = 1e-9
RULE = ("each target on the one-sided 95% bound of a two-level bootstrap (seeds with replacement, then items: one "
        "draw shared by every seed when the seeds evaluated the same items, else within each seed); the seed-level "
        "Student-t bound beside it, not deciding; the pooled point beside both")

#: Issue 61's targets: (name, set, statistic, side, limit). ``side`` ">=": at least the limit (the lower bound
#: decides); "<=": at most; "<": below (strictly). Statistics: ``minus_base:<stat>`` (arm - base), ``ratio``
#: (the paired SC2W ratio), ``vs_misleading_only:correct`` (misleading-only's correct accuracy - the arm's).
TARGETS: tuple[tuple[str, str, str, str, float], ...] = (
    ("held-out items: paired SC2W <= 0.5 x base", "real", "paired_ratio", "<=", 0.5),
    ("held-out items: clean accuracy >= base - 3 points", "real", f"minus_base:{CLEAN}", ">=", -0.03),
    ("held-out items: correct accuracy >= base - 3 points", "real", f"minus_base:{CORRECT}", ">=", -0.03),
    ("held-out items: irrelevant accuracy >= base - 3 points", "real", f"minus_base:{IRRELEVANT}", ">=", -0.03),
    ("held-out items: unknown-correct >= base - 5 points", "real", "minus_base:unknown_correct_accuracy", ">=", -0.05),
    ("held-out relation: paired SC2W <= 0.7 x base", "transfer", "paired_ratio", "<=", 0.7),
    ("held-out relation: correct accuracy >= base - 5 points", "transfer", f"minus_base:{CORRECT}", ">=", -0.05),
    ("held-out relation: unknown-correct >= base - 5 points", "transfer", "minus_base:unknown_correct_accuracy", ">=",
     -0.05),
    ("NQ-Swap: EM on the original passage (containment) >= base - 5 points", "nq_swap", "minus_base:em_org_context",
     ">=", -0.05),
    ("NQ-Swap: EM on the original passage (strict) >= base - 5 points", "nq_swap",
     "minus_base:em_org_context_strict", ">=", -0.05),
    ("NQ-Swap: p_sub below the base's", "nq_swap", "minus_base:p_sub", "<", 0.0),
    ("misleading-only's correct-context accuracy below the arm's", "real", "vs_misleading_only:correct", "<", 0.0),
)
FORMAT_MIN = 0.9
MISLEADING_ONLY = "misleading_only"


# -- reading: each set's per-item features with their item ids ----------------------------------------
def facts_features(run: dict, key: str) -> tuple[list[str], dict[str, np.ndarray]]:
    """``(item ids, {arm: features})`` of one run's facts set ``key`` (:func:`demos.real.pooled.seed_features`'s
    features, items in the base's order)."""
    prefix = EVAL_SETS[str(run.get("split", "test"))][key][0]
    ids, _, _ = item_matrix(Path(run["_dir"]) / "stages" / f"{prefix}_base" / "item_scores.jsonl")
    return [str(i) for i in ids], seed_features(run, key)


def nq_features(run: dict) -> tuple[list[str], dict[str, np.ndarray]]:
    """``(question ids, {arm: features})`` of one run's NQ-Swap evaluations
    (:func:`demos.real.pooled_nq_swap.seed_features`)."""
    from .pooled_nq_swap import item_features, seed_features  # deferred: the module's seed_features is pooled's

    ids, _ = item_features(Path(run["_dir"]) / "stages" / f"{PREFIX}_base" / "item_scores.jsonl")
    return [str(i) for i in ids], seed_features(run)


# -- the statistics ---------------------------------------------------------------------------------------
def _stat_fn(set_key: str, stat: str) -> Callable[[dict[str, np.ndarray], str], np.ndarray]:
    """``f(sums, arm)`` -> the statistic of ``stat`` on summed counts (``sums``: ``{arm: (..., F)}``)."""
    if set_key == "nq_swap":
        from .pooled_nq_swap import rates as fn
    else:
        from .pooled import stats as fn
    kind, _, name = stat.partition(":")
    if kind == "minus_base":
        return lambda sums, arm: fn(sums[arm])[name] - fn(sums[BASE.name])[name]
    if kind == "vs_misleading_only":
        return lambda sums, arm: fn(sums[MISLEADING_ONLY])[name] - fn(sums[arm])[name]
    return lambda sums, arm: fn(sums[arm])[stat]


def _needs(stat: str, arm: str) -> list[str]:
    return [arm, BASE.name] + ([MISLEADING_ONLY] if stat.startswith("vs_misleading_only") else [])


def one_sided_t(values: list[float], side: str) -> float | None:
    """The one-sided 95% Student-t bound of the mean of ``values`` (the low end for ">=", the high end otherwise)."""
    v = np.asarray([x for x in values if x is not None and not math.isnan(x)], dtype=float)
    if v.size < 2:
        return None
    half = student_t_ppf(LEVEL, v.size - 1) * float(v.std(ddof=1)) / math.sqrt(v.size)
    return float(v.mean() - half) if side == ">=" else float(v.mean() + half)


def _holds(x: float | None, side: str, limit: float) -> bool | None:
    if x is None or math.isnan(x):
        return None
    return x >= limit - EPS if side == ">=" else x <= limit + EPS if side == "<=" else x < limit - EPS


def _finite(x) -> float | None:
    x = float(x)
    return None if math.isnan(x) else x


def judge(point: float | None, bound: float | None, side: str, limit: float) -> str:
    """``bound`` | ``point only`` | ``fails`` (the point misses, or is undefined)."""
    if not _holds(point, side, limit):
        return "fails"
    return "bound" if _holds(bound, side, limit) else "point only"


def decide_sets(sets: dict[str, tuple[dict[int, list[str]], dict[int, dict[str, np.ndarray]]]], arm: str,
                runs: list[dict] | None = None, *, n_boot: int = 2000, boot_seed: int = 0) -> dict[str, Any]:
    """The rule on read features (``sets``: ``{set key: (ids by seed, features by seed)}``; a set missing is "not
    run"); ``runs``' summaries give format compliance."""
    out = []
    boots: dict[str, dict[str, np.ndarray]] = {}
    for name, key, stat, side, limit in TARGETS:
        entry = {"name": name, "set": key, "statistic": stat, "side": side, "limit": limit, "point": None,
                 "bound": None, "t_bound": None, "holds": "not run"}
        out.append(entry)
        if key not in sets:
            continue
        ids, per_seed = sets[key]
        need = _needs(stat, arm)
        if not per_seed or not all(a in f for f in per_seed.values() for a in need):
            continue
        arms_here = [a for a in next(iter(per_seed.values())) if all(a in f for f in per_seed.values())]
        if key not in boots:
            boots[key] = two_level_sums(ids, per_seed, arms_here, n_boot=n_boot, boot_seed=boot_seed)
        fn = _stat_fn(key, stat)
        point_sums = {a: sum(per_seed[s][a].sum(axis=0) for s in per_seed).astype(float) for a in arms_here}
        point = _finite(fn(point_sums, arm))
        reps = np.asarray(fn(boots[key], arm), dtype=float)
        reps = reps[~np.isnan(reps)]
        bound = (None if reps.size == 0 else
                 float(np.percentile(reps, 100 * (1 - LEVEL) if side == ">=" else 100 * LEVEL)))
        by_seed = [_finite(fn({a: f.sum(axis=0).astype(float) for a, f in per_seed[s].items()}, arm))
                   for s in sorted(per_seed)]
        entry.update({"point": point, "bound": bound, "t_bound": one_sided_t(by_seed, side),
                      "by_seed": dict(zip(sorted(per_seed), by_seed)), "holds": judge(point, bound, side, limit),
                      "items_shared_by_seeds": shared_items(ids),
                      "n_items": len(set().union(*(set(v) for v in ids.values())))})
    fmt = {"name": f"format compliance >= {FORMAT_MIN} in every run, arm and condition", "set": "real",
           "statistic": "format_compliance", "side": ">=", "limit": FORMAT_MIN, "point": None, "bound": None,
           "t_bound": None, "holds": "not run"}
    if runs:
        vals = [m.get("format_compliance", {}).get(c) or 0.0 for r in runs for m in (r.get("real") or {}).values()
                for c in (m.get("format_compliance") or {})]
        if vals:
            fmt.update({"point": min(vals), "bound": min(vals),
                        "holds": "bound" if min(vals) >= FORMAT_MIN - EPS else "fails"})
    out.append(fmt)
    return {"rule": RULE, "arm": arm, "n_boot": n_boot, "boot_seed": boot_seed, "level": LEVEL,
            "seeds": sorted(next(iter(sets.values()))[0]) if sets else [], "targets": out}


def decide(runs: list[dict], arm: str, *, n_boot: int = 2000, boot_seed: int = 0) -> dict[str, Any]:
    """:func:`decide_sets` on the runs' item files (the facts sets every run has; NQ-Swap over the runs that
    evaluated it, as the pooled NQ-Swap table (:mod:`demos.real.pooled_nq_swap`): issue 61's ten test seeds evaluate
    it on one seed; "not run" when none did)."""
    sets = {}
    for key in (k for k in SETS if all(k in r for r in runs)):
        read = {r["seed"]: facts_features(r, key) for r in runs}
        sets[key] = ({s: v[0] for s, v in read.items()}, {s: v[1] for s, v in read.items()})
    if nq_runs := [r for r in runs if NQ in r]:
        read = {r["seed"]: nq_features(r) for r in nq_runs}
        sets["nq_swap"] = ({s: v[0] for s, v in read.items()}, {s: v[1] for s, v in read.items()})
    return decide_sets(sets, arm, runs, n_boot=n_boot, boot_seed=boot_seed)


# -- the table ------------------------------------------------------------------------------------------
def _fmt(stat: str, x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x:.2f}×" if stat == "paired_ratio" else f"{x * 100:+.1f}" if stat != "format_compliance" else f"{x:.3f}"


def lines(decision: dict | None) -> list[str]:
    """The pooled table's decision section: each target's point, its two-level bound (which decides) and the seed
    t-bound, and whether it holds on the bound, on the point only, fails or did not run; then the two lists."""
    if not decision:
        return []
    rows = []
    for t in decision["targets"]:
        rows.append([t["name"], _fmt(t["statistic"], t["point"]), _fmt(t["statistic"], t["bound"]),
                     _fmt(t["statistic"], t["t_bound"]), t["holds"]])

    hold = [t["name"] for t in decision["targets"] if t["holds"] == "bound"]
    point = [t["name"] for t in decision["targets"] if t["holds"] == "point only"]
    return [f"**The decision rule ({arm_label(decision['arm'])}; docs/real_model.md#the-decision-rule)**: "
            f"{decision['rule']}; {decision['n_boot']} replicates (seed {decision['boot_seed']}). Differences in "
            "points (arm - base), the paired SC2W ratio as x.", "",
            md_table(["target", "point", "one-sided 95% bound (decides)", "seed t-bound", "holds"], rows), "",
            f"- Hold on the bound: {', '.join(hold) or 'none'}.",
            f"- Hold on the point only: {', '.join(point) or 'none'}.", ""]


__all__ = ["LEVEL", "RULE", "TARGETS", "decide", "decide_sets", "judge", "lines", "one_sided_t", "shared_items",
           "two_level_sums"]
