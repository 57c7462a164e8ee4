"""NQ-Swap pooled over seeds (issue 52; docs/nq_swap.md#in-the-demos): ``pooled.json``'s ``nq_swap`` and the
NQ-Swap part of ``pooled_table.md`` that ``python -m demos.real.seeds`` writes beside the facts sets'
(:mod:`demos.real.pooled`).

Read from each run's ``stages/nqswap_<arm>/item_scores.jsonl`` (every number recomputed from the items, as the facts
sets' are), **pooled over the runs that evaluated NQ-Swap** (``summary.json``'s ``nq_swap``). A run without it (the
main job's default, a dev run) is "not run": listed in ``not_run`` and shown as "not run" rows, never dropped
silently; with no run evaluating it, the pooled table says "not run" and the target is not run.

- **Rates** (:data:`RATES`): ``em_org_context``, exact match on the original passage (the response names the original
  answer); ``p_sub``, on the substituted passage the share naming the substitute alone (the literature's exact match
  on the substituted context); ``p_org``, naming the original alone; the memorization ratio ``p_org / (p_org +
  p_sub)``; and the same on the items the base's estimate labels known (``known_*``).
- **Intervals**, those of the facts sets: item-level percentile bootstrap stratified by seed, each arm paired with the
  base on the same items (:func:`eval_hooks.metrics.common.seed_stratified_sums`); each arm's change from its own
  seed's base in :data:`DIFFS`, pooled (paired by item) and per seed, with the seed-level Student-t interval of the
  per-seed changes (:func:`eval_hooks.metrics.common.seed_spread`).
- **Target**: the checked arm's pooled change in ``em_org_context`` >= -``nq_swap_em_drop_max``
  (:func:`pooled_target`), on the runs that evaluated NQ-Swap.

``pooled.json``'s ``nq_swap``: ``{"seeds": [the seeds pooled], "not_run": [the seeds without NQ-Swap], "arms": {arm:
{<rate>: {"value", "ci"}, "n_items", "n_known", "minus_base": {<diff>: {"value", "ci"}}, "per_seed": {<diff>:
{"by_seed", "min", "max", "worst_seed", "mean", "seed_ci"}}}}}`` (``arms`` empty when no run evaluated it).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from eval_hooks.metrics.common import (CI_LEVEL, finite_or_none, nan_ratio, percentile_ci, seed_spread,
                                       seed_stratified_sums)
from eval_hooks.scoring.report_kit import md_table, pct, pp, with_ci
from selectrust.conditions import CLEAN, CORRECT, MISLEADING
from selectrust.core.errors import DataError

from .arms import ARMS, BASE, trained
from .arms import label as arm_label
from .bootstrap import shared_items, two_level_sums
from .nq_swap import EPS, KEY, NOT_RUN, PREFIX, target_name
from eval_hooks.families.mist.metrics import mist_items
from eval_hooks.families.nq_swap.metrics import misleading_outcome, strict_match
from selectrust.core.io import read_records

#: Per-item 0/1 counts of one model on one item (:func:`item_features`): the item, its correct-passage exact match,
#: which answer it names under the substituted passage (the original alone, the substitute alone), and the same on
#: the items the base's estimate labels known.
FEATURES = ("n", "em", "org", "sub", "known", "known_org", "known_sub", "em_strict")
_F = {f: i for i, f in enumerate(FEATURES)}
#: The rates pooled, in the order the tables show them (``known_*``: on the items the base knows).
RATES = ("em_org_context", "em_org_context_strict", "p_sub", "p_org", "memorization_ratio", "known_p_sub",
         "known_p_org", "known_memorization_ratio")
#: The arm's change from its seed's base, pooled and per seed, with the worst seed's direction (the facts sets'
#: reading: using the original passage less, and resisting the substituted one less, is worse).
DIFFS = {"em_org_context": min, "p_sub": max, "p_org": min, "memorization_ratio": min}
#: How the tables name them.
NAMES = {"em_org_context": "EM contained (orig. passage)", "em_org_context_strict": "EM strict (orig. passage)",
         "p_sub": "p_sub = EM (subst. passage)", "p_org": "p_org",
         "memorization_ratio": "MR", "known_p_sub": "known: p_sub", "known_p_org": "known: p_org",
         "known_memorization_ratio": "known: MR"}
NOT_RUN_TEXT = "not run"


# -- reading ---------------------------------------------------------------------------------------
def item_features(path: Path) -> tuple[list, np.ndarray]:
    """``(item ids, (n_items, len(FEATURES)) 0/1 counts)`` of one ``item_scores.jsonl`` of the nq_swap family (the
    known label: the clean row's ``knowledge``, else its own correctness, as the family's metrics do); a DataError
    naming the file."""
    rows = [row for _, row in read_records(path)]
    try:
        items = mist_items(rows)
        ids, feats = [], []
        for item_id, r in items.items():
            outcome = misleading_outcome(r[MISLEADING])
            label = r[CLEAN].get("knowledge")
            known = label == "known" if label is not None else bool(r[CLEAN]["correct"])
            org, sub = outcome == "org", outcome == "sub"
            ids.append(item_id)
            feats.append([1, bool(r[CORRECT]["correct"]), org, sub, known, known and org, known and sub,
                          strict_match(r[CORRECT])])
    except (KeyError, ValueError, TypeError) as e:
        raise DataError(f"not an NQ-Swap evaluation ({type(e).__name__}: {e})", path=path) from None
    return ids, np.array(feats, dtype=np.int64).reshape(len(ids), len(FEATURES))


def seed_features(run: dict) -> dict[str, np.ndarray]:
    """``{arm: features}`` of one run's NQ-Swap evaluations (every arm its summary's ``nq_swap`` has), items in the
    base's order; a DataError naming the file of an arm whose items are not the base's."""
    stages = Path(run["_dir"]) / "stages"
    ids, base = item_features(stages / f"{PREFIX}_base" / "item_scores.jsonl")
    out = {BASE.name: base}
    for arm in (a for a in ARMS if a in run[KEY] and trained(a)):
        path = stages / f"{PREFIX}_{arm}" / "item_scores.jsonl"
        arm_ids, f = item_features(path)
        if sorted(map(str, arm_ids)) != sorted(map(str, ids)):
            raise DataError(f"its items are not those of {PREFIX}_base/item_scores.jsonl ({len(arm_ids)} against "
                            f"{len(ids)} items)", path=path)
        order = {str(i): j for j, i in enumerate(arm_ids)}
        out[arm] = f[[order[str(i)] for i in ids]]
    return out


# -- statistics ------------------------------------------------------------------------------------
def rates(counts: np.ndarray) -> dict[str, np.ndarray]:
    """The :data:`RATES` of summed feature counts (``(..., len(FEATURES))``; leading axes kept, NaN where a
    denominator is 0)."""
    c = {f: counts[..., i].astype(float) for f, i in _F.items()}

    return {"em_org_context": nan_ratio(c["em"], c["n"]), "em_org_context_strict": nan_ratio(c["em_strict"], c["n"]),
            "p_sub": nan_ratio(c["sub"], c["n"]),
            "p_org": nan_ratio(c["org"], c["n"]), "memorization_ratio": nan_ratio(c["org"], c["org"] + c["sub"]),
            "known_p_sub": nan_ratio(c["known_sub"], c["known"]), "known_p_org": nan_ratio(c["known_org"], c["known"]),
            "known_memorization_ratio": nan_ratio(c["known_org"], c["known_org"] + c["known_sub"])}


def pool(per_seed: dict[int, dict[str, np.ndarray]], *, n_boot: int = 2000, boot_seed: int = 0,
         level: float | None = None, ids: dict[int, list[str]] | None = None) -> dict[str, dict]:
    """Pooled NQ-Swap rates per arm (``per_seed``: ``{seed: {arm: features}}``, :func:`seed_features`; arms of every
    seed only) with item-bootstrap intervals stratified by seed (every arm and the base share the replicate's items),
    the arm's change from the base in :data:`DIFFS` and its per-seed spread with the seed-level interval (module
    docstring), as :func:`demos.real.pooled.pool` does for the facts sets."""
    level = CI_LEVEL if level is None else level
    arms = [a for a in ARMS if all(a in f for f in per_seed.values())]
    point, boot = seed_stratified_sums(per_seed, arms, BASE.name, n_boot=n_boot, boot_seed=boot_seed)
    clustered = ids is not None and shared_items(ids)
    if clustered:  # issue 60: the same questions in every seed: resample questions, one draw for every seed
        boot = two_level_sums(ids, per_seed, arms, n_boot=n_boot, boot_seed=boot_seed, resample_seeds=False)
    base_pt, base_bt = rates(point[BASE.name]), rates(boot[BASE.name])
    by_seed = {s: {a: rates(f[a].sum(axis=0)) for a in arms} for s, f in per_seed.items()}
    out = {}
    for a in arms:
        pt, bt = rates(point[a]), rates(boot[a])
        entry: dict[str, Any] = {k: {"value": finite_or_none(pt[k]), "ci": percentile_ci(bt[k], level)} for k in RATES}
        entry["n_items"], entry["n_known"] = int(point[a][_F["n"]]), int(point[a][_F["known"]])
        # distinct questions (an evaluation of the same question on two seeds is one question), and how the
        # interval resampled them
        entry["n_questions"] = (len(set().union(*(set(v) for v in ids.values()))) if ids is not None
                                else entry["n_items"])
        entry["interval"] = "clustered by question" if clustered else "items within each seed"
        entry["minus_base"] = {k: {"value": finite_or_none(pt[k] - base_pt[k]),
                                   "ci": percentile_ci(bt[k] - base_bt[k], level)} for k in DIFFS}
        spread = {k: seed_spread({s: float(r[a][k] - r[BASE.name][k]) for s, r in by_seed.items()}, level, worst)
                  for k, worst in DIFFS.items()}
        entry["per_seed"] = {k: v for k, v in spread.items() if v is not None}
        out[a] = entry
    return out


def pooled_runs(runs: list[dict], *, n_boot: int, boot_seed: int) -> dict[str, Any]:
    """``pooled.json``'s ``nq_swap`` (module docstring): :func:`pool` of the runs that evaluated NQ-Swap (``seeds``),
    the seeds of the others (``not_run``); ``arms`` empty when none did. Reads every item file first."""
    have = [r for r in runs if KEY in r]
    feats = {r["seed"]: seed_features(r) for r in have}
    ids = {r["seed"]: [str(i) for i in item_features(Path(r["_dir"]) / "stages" / f"{PREFIX}_base" /
                                                      "item_scores.jsonl")[0]] for r in have}
    return {"seeds": sorted(feats), "not_run": sorted(r["seed"] for r in runs if KEY not in r),
            "arms": pool(feats, n_boot=n_boot, boot_seed=boot_seed, ids=ids) if feats else {}}


def pooled_arms(nq: dict | None) -> dict[str, dict]:
    """The pooled arms of ``pooled.json``'s ``nq_swap`` ({} when no run evaluated NQ-Swap, or for a pooled.json
    written before it)."""
    return (nq or {}).get("arms") or {}


def pooled_target(nq: dict | None, arm: str, name: str, limit: float) -> dict[str, bool | None]:
    """The NQ-Swap target on the pooled point estimate (the arm's ``em_org_context`` - the base's >= -``limit``);
    :data:`demos.real.nq_swap.NOT_RUN` when no run evaluated NQ-Swap (or that arm)."""
    key = f"{target_name(name, limit)} (pooled)"
    arms = pooled_arms(nq)
    if arm not in arms:
        return {key: NOT_RUN}
    x = arms[arm]["minus_base"]["em_org_context"]["value"]
    return {key: x is not None and x >= -limit - EPS}


# -- the table -------------------------------------------------------------------------------------
def seeds_line(nq: dict) -> str:
    """Which seeds the pooled NQ-Swap numbers are over, and on which NQ-Swap did not run."""
    line = f"seeds {', '.join(map(str, nq['seeds']))}"
    if nq.get("not_run"):
        line += (f"; **not run** on seed(s) {', '.join(map(str, nq['not_run']))} (no `nq_swap` in their "
                 "summary.json), left out of these numbers")
    return line


def by_seed_rows(nq: dict) -> list[list]:
    """Each seed's change from its own base per trained arm (:data:`DIFFS`), in seed order; "not run" rows for the
    seeds without NQ-Swap."""
    arms = [a for a in pooled_arms(nq) if trained(a)]
    rows = []
    for seed in sorted([*nq["seeds"], *nq.get("not_run", [])]):
        for a in arms:
            if seed in nq.get("not_run", []):
                rows.append([seed, arm_label(a), *[NOT_RUN_TEXT] * len(DIFFS)])
                continue
            per = nq["arms"][a]["per_seed"]
            cells = []
            for k in DIFFS:
                by = (per.get(k) or {}).get("by_seed") or {}
                v = by.get(seed, by.get(str(seed)))  # str keys: a pooled.json read back
                cells.append(pp(v))
            rows.append([seed, arm_label(a), *cells])
    return rows


def pooled_lines(nq: dict | None, level: float) -> list[str]:
    """The pooled table's NQ-Swap part: the pooled rates with their intervals, each trained arm's change from the
    base (pooled, and the per-seed spread with the seed-level interval), each seed's change ("not run" rows for the
    runs without NQ-Swap); one "not run" line when no run evaluated it."""
    arms = pooled_arms(nq)
    if not arms:
        return ["**NQ-Swap (an outside benchmark)**: not run (no run evaluated it: `real.nq_swap_questions=0`, the "
                "main job's default, or `real.split=dev`).", ""]
    rows = [[arm_label(a), e.get("n_questions", e["n_items"]), e["n_items"], e["n_known"],
             *(with_ci(e[k]) for k in RATES)] for a, e in arms.items()]
    how = next(iter(arms.values())).get("interval", "items within each seed")
    parts = [f"**NQ-Swap (an outside benchmark), pooled** ({seeds_line(nq)}; intervals: {how}; \"EM contained\": "
             "the response names the original answer after normalisation, the one the target reads; \"EM "
             "strict\": its first sentence is the answer, both targets checked by the decision rule)", "",
             md_table(["arm", "questions", "evaluations", "known", *(NAMES[k] for k in RATES)], rows), ""]
    rows = []
    for a in (a for a in arms if trained(a)):
        for k in DIFFS:
            s = arms[a]["per_seed"].get(k)
            seed = with_ci({"value": s["mean"], "ci": s["seed_ci"]}, pp) if s else "–"
            rows.append([arm_label(a), k, with_ci(arms[a]["minus_base"][k], pp), seed,
                         pp(s["min"]) if s else "–", pp(s["max"]) if s else "–", s["worst_seed"] if s else "–"])
    parts += [f"**NQ-Swap: arm - base** (pooled, paired by item; per seed, their mean over the {len(nq['seeds'])} runs "
              f"that evaluated it with a {level:.0%} Student-t interval)", "",
              md_table(["arm", "metric", "pooled [item bootstrap]", "seed mean [t interval]", "min", "max",
                        "worst seed"], rows), "",
              "**NQ-Swap: arm - base on each seed**", "",
              md_table(["seed", "arm", *(NAMES[k] for k in DIFFS)], by_seed_rows(nq)), ""]
    return parts
