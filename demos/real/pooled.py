"""Evidence pooled over seeds (issue 44, items 2 and 5): what ``python -m demos.real.seeds`` writes as
``pooled_table.md`` and ``pooled.json`` beside the seed table.

Read from each run's ``stages/<prefix>_<arm>/item_scores.jsonl`` (``prefix``: ``eval`` for the held-out items,
``transfer`` for the held-out relation; :data:`demos.real.pipeline.EVAL_SETS`), not from the summaries: every number
is recomputed from the items, so the pooled numbers and their intervals rest on the same rows. NQ-Swap is pooled
the same way over the runs that evaluated it (``stages/nqswap_<arm>/item_scores.jsonl``) by
:mod:`demos.real.pooled_nq_swap` (``pooled.json``'s ``nq_swap``: its rates with intervals, each arm's change from the
base, the per-seed spread; the other runs "not run").

- **Pooled**: the items of every seed together (each seed has its own held-out items). Accuracy per condition,
  SC2W (each arm's own clean-correct items, as the seed table's), ``unknown_correct_accuracy`` (correct-context
  accuracy on the items the base's estimate labels unknown, the label every arm's rows carry) and each arm's
  difference from the base.
- **Paired SC2W**: on the base's clean-correct items of each seed (one denominator for every arm), the share the arm
  gets wrong under the misleading context. Of those items: ``kept`` (base and arm resist), ``lost`` (the base
  resists, the arm switches), ``gained`` (the base switches, the arm resists: ``repair_analysis``'s repaired),
  ``still_switched`` (both switch). The arm's paired SC2W is (lost + still) / n, the base's (gained + still) / n
  (its SC2W), their ratio the target's.
- **Intervals**: item-level percentile bootstrap, stratified by seed: each replicate resamples every seed's items
  with replacement (as many as it has) and pools them; every arm and the base share the replicate's items (paired).
  ``n_boot`` replicates from ``numpy.random.default_rng(boot_seed)``, seeds in ascending order.
  The item bootstrap treats the trained adapters as fixed: it says how much the numbers move with the items drawn,
  not with the training seed.
- **Per seed**: each arm's difference from the base on each seed (the paired SC2W ratio for ``paired_ratio``), its
  range, the worst seed, and the **seed-level interval**: their mean with a Student-t interval over the trained runs
  (mean +- t_{0.975, n-1} sd / sqrt(n): each run's training seed counted as one draw, so the interval includes the
  training's variance; :func:`eval_hooks.metrics.common.t_interval`). Reported beside the item bootstrap.
- **Targets** (:data:`demos.real.report.TARGETS`) checked on the pooled point estimates of one arm, and the
  per-seed ones on every seed. A target whose evaluation or arm did not run in these runs (the held-out relation
  switched off, misleading-only not trained) is ``None``, shown as "not run", not dropped.
- **Refused** (:func:`check_provenance`): runs whose provenance differs (precision of each stage, threads, commit,
  versions, CPU), a run some of whose stages ran under another provenance than the run (``stage_provenance``), and a
  run continued with ``reuse: config``, unless told (``--allow-mixed-provenance``, ``--allow-config-reuse``: the
  tables then say so).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from selectrust.core.errors import DataError
from selectrust.core.io import read_records
from eval_hooks.metrics.common import (CI_LEVEL, finite_or_none, nan_ratio, percentile_ci, seed_spread,
                                       seed_stratified_sums)
from eval_hooks.scoring.report_kit import md_table, pct, pp, times, with_ci
from selectrust.conditions import BENIGN_CONDITIONS, CLEAN, CORRECT, MIST_CONDITIONS as CONDS, UNKNOWN_CORRECT

from . import pooled_nq_swap
from .arms import ARMS, trained
from .arms import label as arm_label
from .prompts import EVAL_SETS
from .report import NOT_RUN, SETS, TARGETS, not_run_targets, verdict
from eval_hooks.families.mist.metrics import correctness_matrix, mist_items

#: The per-item counts each statistic is a ratio of (columns of an arm's feature matrix, one row per item).
FEATURES = ("n", *CONDS, "clean_correct", "switched", "unknown", UNKNOWN_CORRECT,
            "paired_n", "kept", "lost", "gained", "still_switched")
_F = {f: i for i, f in enumerate(FEATURES)}
EPS = 1e-9  # a difference of rates exactly at the limit is met
SPLITS = ("dev", "test")


# -- reading -------------------------------------------------------------------------------------
def run_split(run: dict) -> str:
    """The split a run evaluated (``summary.json``'s ``split``; a run without the key evaluated the test items)."""
    split = run.get("split", "test")
    if split not in SPLITS:
        raise DataError(f"split {split!r} is not one of {', '.join(SPLITS)}", path=Path(run["_dir"]) / "summary.json",
                        field="split")
    return split


def check_split(runs: list[dict], wanted: str | None = None) -> str:
    """The one split of ``runs`` (:func:`run_split`); a DataError naming the first run of another split, or of a
    split other than ``wanted``."""
    split = wanted or run_split(runs[0])
    for r in runs:
        if run_split(r) != split:
            raise DataError(f"split {run_split(r)!r}, but the table pools {split!r} runs: dev and test runs are never "
                            "pooled", path=Path(r["_dir"]) / "summary.json", field="split")
    return split


def same_provenance(a: dict | None, b: dict | None) -> bool:
    """Whether two runs' ``provenance`` agree (:func:`_differences` finds nothing): every key equal, except
    ``stage_precision``, whose stages both runs made must agree (runs pooled with ``--vary real.<arm>`` have different
    stages: an arm or NQ-Swap in one run only)."""
    return isinstance(a, dict) and isinstance(b, dict) and not _differences(a, b)


def check_provenance(runs: list[dict], allow_mixed: bool = False, allow_config_reuse: bool = False) -> str | None:
    """None when every run has the same ``provenance`` (each stage's precision, torch threads, package versions, git
    commit, CPU), no run has a stage made under another provenance than its own (``stage_provenance``) and no run
    was continued with ``reuse: config``; otherwise a DataError naming the first such run (a run without
    ``provenance`` has unknown provenance), unless allowed (``allow_mixed``: differing or unknown provenance;
    ``allow_config_reuse``: ``reuse: config``): then the lines the tables print in their header."""
    notes = []
    reused = [r for r in runs if r.get("reuse") == "config"]
    if reused and not allow_config_reuse:
        raise DataError("reuse: config (its stages were reused on their config and inputs alone, whatever code, "
                        "precision or machine made them): not pooled (--allow-config-reuse pools it, and says so in "
                        "the tables)", path=Path(reused[0]["_dir"]) / "summary.json", field="reuse")
    if reused:
        notes.append("**Reused by config only, pooled with --allow-config-reuse**: "
                     f"{', '.join(r['_dir'] for r in reused)}.")
    first = runs[0].get("provenance")
    odd = [r for r in runs if not same_provenance(first, r.get("provenance"))] if len(runs) > 1 else []
    inner = [r for r in runs if r.get("stage_provenance")]
    if (odd or inner) and not allow_mixed:
        if odd:
            r = odd[0]
            why = ("has no `provenance` (unknown)" if r.get("provenance") is None else
                   f"provenance {_differences(first, r['provenance'])} differs from {runs[0]['_dir']}'s")
            field = "provenance"
        else:
            r = inner[0]
            stages = "; ".join(f"{stage} ({', '.join(sorted(d))})" for stage, d in r["stage_provenance"].items())
            why = f"stage(s) {stages} ran under another provenance than the run"
            field = "stage_provenance"
        raise DataError(f"{why}: runs of another precision, thread count, package set, commit or CPU are not pooled "
                        "(--allow-mixed-provenance pools them, and says so in the tables)",
                        path=Path(r["_dir"]) / "summary.json", field=field)
    if odd or inner:
        dirs = ", ".join(dict.fromkeys(r["_dir"] for r in (*odd, *inner)))
        notes.append(f"**Mixed provenance, pooled with --allow-mixed-provenance**: {dirs} differ from "
                     f"{runs[0]['_dir']}, lack it or hold stages made under another.")
    return " ".join(notes) or None


def provenance_line(prov: Any) -> str:
    """The pooled table's provenance line: each stage's precision (one name when they agree), threads, commit,
    CPU model and instruction sets, versions."""
    if not isinstance(prov, dict):
        return "Provenance: unknown."
    parts = []
    for k, v in prov.items():
        if k == "stage_precision" and isinstance(v, dict):
            continue
        if k == "cpu" and isinstance(v, dict):
            flags = ", ".join(v.get("flags") or []) or "none of AMX-BF16, AVX512-BF16, AVX-512, AVX2"
            v = f"{v.get('model')} ({flags})"
        elif isinstance(v, dict):
            v = ", ".join(f"{a} {b}" for a, b in v.items())
        parts.append(f"{k} {v}")
    stages = prov.get("stage_precision")
    if isinstance(stages, dict) and len({*stages.values()}) > 1:
        parts.append("stage precision " + ", ".join(f"{a} {b}" for a, b in stages.items()))
    return "Provenance: " + "; ".join(parts) + "."


def _key_differs(key: str, x: Any, y: Any) -> bool:
    if key == "stage_precision" and isinstance(x, dict) and isinstance(y, dict):  # the stages both runs made
        return any(x[s] != y[s] for s in x.keys() & y.keys())
    return x != y


def _differences(a: Any, b: Any) -> str:
    """The provenance keys in which ``a`` and ``b`` differ, comma-separated ("" when they agree:
    :func:`same_provenance`)."""
    if not isinstance(a, dict) or not isinstance(b, dict):
        return "(missing)" if a is None else "(all)"
    return ", ".join(sorted(k for k in a.keys() | b.keys() if _key_differs(k, a.get(k), b.get(k))))


def item_matrix(path: Path) -> tuple[list, np.ndarray, np.ndarray]:
    """``(item ids, correct (n_items, 4) bool in MIST order, unknown (n_items,) bool)`` of one ``item_scores.jsonl``
    (``unknown``: the item's clean row carries ``knowledge: unknown``); a DataError naming the file."""
    rows = [row for _, row in read_records(path)]
    try:
        items = mist_items(rows)
    except (KeyError, ValueError) as e:
        raise DataError(f"not a MIST evaluation ({e})", path=path) from None
    unknown = np.array([r[CLEAN].get("knowledge") == "unknown" for r in items.values()], dtype=bool)
    return list(items), correctness_matrix(items), unknown


def features(base: np.ndarray, arm: np.ndarray, unknown: np.ndarray) -> np.ndarray:
    """The ``(n_items, len(FEATURES))`` 0/1 counts of one arm against the base on the same items (``base``, ``arm``:
    ``(n_items, 4)`` bool; ``unknown``: ``(n_items,)`` bool, the base's labels)."""
    clean, mis, correct = arm[:, 0], arm[:, 1], arm[:, 2]
    d, b_mis = base[:, 0], base[:, 1]
    cols = {"n": np.ones(len(arm), dtype=bool), **{c: arm[:, j] for j, c in enumerate(CONDS)},
            "clean_correct": clean, "switched": clean & ~mis, "unknown": unknown, UNKNOWN_CORRECT: unknown & correct,
            "paired_n": d, "kept": d & b_mis & mis, "lost": d & b_mis & ~mis, "gained": d & ~b_mis & mis,
            "still_switched": d & ~b_mis & ~mis}
    return np.stack([cols[f] for f in FEATURES], axis=1).astype(np.int64)


def seed_features(run: dict, key: str, prefix: str | None = None) -> dict[str, np.ndarray]:
    """``{arm: features}`` of one run's evaluation set ``key`` (every arm its summary has), items in the base's
    order; a DataError naming the file of an arm whose items are not the base's. ``prefix``: the evaluation stages'
    name prefix (None: the split's, :data:`EVAL_SETS`; :mod:`demos.real.second_relation` names its own)."""
    if prefix is None:
        prefix = EVAL_SETS[str(run.get("split", "test"))][key][0]  # a summary from before `split`: test
    stages = Path(run["_dir"]) / "stages"
    ids, base, unknown = item_matrix(stages / f"{prefix}_base" / "item_scores.jsonl")
    out = {}
    for arm in (a for a in ARMS if a in run[key]):
        path = stages / f"{prefix}_{arm}" / "item_scores.jsonl"
        arm_ids, a, _ = item_matrix(path)
        if sorted(map(str, arm_ids)) != sorted(map(str, ids)):
            raise DataError(f"its items are not those of {prefix}_base/item_scores.jsonl "
                            f"({len(arm_ids)} against {len(ids)} items)", path=path)
        order = {str(i): j for j, i in enumerate(arm_ids)}
        out[arm] = features(base, a[[order[str(i)] for i in ids]], unknown)
    return out


def run_paired(out_dir: str | Path, split: str, key: str, arms: list[str], *, n_boot: int = 2000,
               boot_seed: int = 0) -> dict[str, dict]:
    """``{arm: paired}`` of one run's evaluation set ``key`` (``arms``, the base among them): the paired SC2W counts,
    values and item-bootstrap intervals of :func:`pool` on that run alone (``summary.json``'s ``<key>.<arm>.paired``,
    what the per-run report, the seed table and the slow test read)."""
    run = {"_dir": str(out_dir), "split": split, key: dict.fromkeys(arms)}
    pooled = pool({0: seed_features(run, key)}, n_boot=n_boot, boot_seed=boot_seed)
    return {a: e["paired"] for a, e in pooled.items()}


# -- statistics ------------------------------------------------------------------------------------
def stats(counts: np.ndarray) -> dict[str, np.ndarray]:
    """The statistics of summed feature counts ``counts`` (``(..., len(FEATURES))``; leading axes kept, NaN where
    a denominator is 0)."""
    c = {f: counts[..., i].astype(float) for f, i in _F.items()}

    out = {cond: nan_ratio(c[cond], c["n"]) for cond in CONDS}
    out["sc2w"] = nan_ratio(c["switched"], c["clean_correct"])
    out["situated_faithfulness"] = (out[CORRECT] + out[CONDS[1]]) / 2.0  # CR-DPO's SF: correct and misleading
    out["unknown_correct_accuracy"] = nan_ratio(c[UNKNOWN_CORRECT], c["unknown"])
    out["paired_sc2w"] = nan_ratio(c["lost"] + c["still_switched"], c["paired_n"])
    out["base_paired_sc2w"] = nan_ratio(c["gained"] + c["still_switched"], c["paired_n"])
    out["paired_ratio"] = nan_ratio(out["paired_sc2w"], out["base_paired_sc2w"])
    return out


DIFFS = (*CONDS, "unknown_correct_accuracy", "sc2w")  # arm - base, in rates


def pool(per_seed: dict[int, dict[str, np.ndarray]], *, n_boot: int = 2000, boot_seed: int = 0,
         level: float = CI_LEVEL) -> dict[str, Any]:
    """Pooled statistics of one evaluation set, per arm, with their stratified bootstrap intervals (module docstring).
    ``per_seed``: ``{seed: {arm: features}}`` (:func:`seed_features`); arms of every seed only."""
    arms = [a for a in ARMS if all(a in f for f in per_seed.values())]
    point, boot = seed_stratified_sums(per_seed, arms, "base", n_boot=n_boot, boot_seed=boot_seed)
    base_pt, base_bt = stats(point["base"]), stats(boot["base"])
    out = {}
    for a in arms:
        pt, bt = stats(point[a]), stats(boot[a])
        entry = {k: {"value": finite_or_none(pt[k]), "ci": percentile_ci(bt[k], level)}
                 for k in (*CONDS, "sc2w", "situated_faithfulness", "unknown_correct_accuracy")}
        entry["n_items"] = int(point[a][_F["n"]])
        entry["n_unknown"] = int(point[a][_F["unknown"]])
        entry["minus_base"] = {k: {"value": finite_or_none(pt[k] - base_pt[k]),
                                   "ci": percentile_ci(bt[k] - base_bt[k], level)}
                               for k in (*DIFFS, "situated_faithfulness")}
        counts = ("paired_n", "kept", "lost", "gained", "still_switched")
        entry["paired"] = {**{k: int(point[a][_F[k]]) for k in counts},
                           **{k: {"value": finite_or_none(pt[k]), "ci": percentile_ci(bt[k], level)}
                              for k in ("paired_sc2w", "base_paired_sc2w", "paired_ratio")}}
        entry["per_seed"] = per_seed_values(per_seed, a, level)
        out[a] = entry
    return out


PER_SEED = (*DIFFS, "paired_ratio")  # per seed: arm - base, and the paired SC2W ratio


def per_seed_values(per_seed: dict[int, dict[str, np.ndarray]], arm: str, level: float = CI_LEVEL) -> dict[str, dict]:
    """``{metric: {"by_seed": {seed: value}, "min", "max", "worst_seed", "mean", "seed_ci"}}``: the arm's difference
    from the base (the paired SC2W ratio for ``paired_ratio``) on each seed; the worst seed is the lowest difference
    (highest ratio); ``seed_ci``: the Student-t interval of their mean over the seeds (None with one seed)."""
    out = {}
    for k in PER_SEED:
        vals = {}
        for s in sorted(per_seed):
            a, b = stats(per_seed[s][arm].sum(axis=0)), stats(per_seed[s]["base"].sum(axis=0))
            vals[s] = a[k] if k == "paired_ratio" else a[k] - b[k]
        spread = seed_spread(vals, level, max if k in ("paired_ratio", "sc2w") else min)
        if spread is not None:
            out[k] = spread
    return out


# -- targets ---------------------------------------------------------------------------------------
def _as_metrics(entry: dict) -> dict:
    """A pooled entry in the shape of a run's metrics (for the arms' own targets, :attr:`DemoArm.targets`)."""
    return {"accuracy": {c: entry[c]["value"] for c in CONDS}, "sc2w": entry["sc2w"]["value"],
            "unknown_correct_accuracy": entry["unknown_correct_accuracy"]["value"]}


def _at_least(x: float | None, limit: float) -> bool:
    return x is not None and x >= limit - EPS


def check_pooled_targets(pooled: dict[str, dict], arm: str, runs: list[dict], t: dict = TARGETS, *,
                         nq: dict | None = None) -> dict[str, bool | None]:
    """Issue 44 item 5's targets for ``arm``: on the pooled point estimates (``pooled``: ``{set key: pool()}``;
    ``nq``: NQ-Swap's, :func:`demos.real.pooled_nq_swap.pooled_runs`), the per-seed ones on every seed, the other
    arms' own targets on the pooled numbers, format compliance on every run's summary; None (not run) for those of an
    evaluation set or arm the runs do not have (:func:`demos.real.report.not_run_targets`)."""
    r, name = pooled["real"], arm_label(arm)
    a = r[arm]
    out = {f"{name} paired SC2W <= {t['sc2w_ratio_max']} x base (pooled)":
           a["paired"]["paired_ratio"]["value"] is not None
           and a["paired"]["paired_ratio"]["value"] <= t["sc2w_ratio_max"] + EPS}
    for c in BENIGN_CONDITIONS:
        out[f"{name} {c} accuracy >= base - {t['accuracy_drop_max']:.2f} (pooled)"] = _at_least(
            a["minus_base"][c]["value"], -t["accuracy_drop_max"])
    out[f"{name} unknown_correct_accuracy >= base - {t['unknown_correct_drop_max']:.2f} (pooled)"] = _at_least(
        a["minus_base"]["unknown_correct_accuracy"]["value"], -t["unknown_correct_drop_max"])
    tr = pooled.get("transfer") or {}
    ratio_key = f"{name} on the held-out relation: paired SC2W <= {t['transfer_sc2w_ratio_max']} x base (pooled)"
    correct_key = (f"{name} on the held-out relation: correct accuracy >= base - {t['transfer_correct_drop_max']:.2f} "
                   "(pooled)")
    if arm in tr:
        ratio = tr[arm]["paired"]["paired_ratio"]["value"]
        out[ratio_key] = ratio is not None and ratio <= t["transfer_sc2w_ratio_max"] + EPS
        out[correct_key] = _at_least(tr[arm]["minus_base"][CORRECT]["value"], -t["transfer_correct_drop_max"])
    else:
        out.update({ratio_key: NOT_RUN, correct_key: NOT_RUN})
    out.update(pooled_nq_swap.pooled_target(nq, arm, name, t["nq_swap_em_drop_max"]))  # not run without NQ-Swap
    for k, drop in ((CORRECT, t["seed_correct_drop_max"]),
                    ("unknown_correct_accuracy", t["seed_unknown_correct_drop_max"])):
        spread = a["per_seed"].get(k)
        out[f"{name} {k} >= base - {drop:.2f} on every seed"] = spread is not None and _at_least(spread["min"], -drop)
    for other in (o for o in r if trained(o)):
        own = ARMS.get(other).targets
        if own is not None:
            out.update({f"{k} (pooled)": v for k, v in own(_as_metrics(r[other]), _as_metrics(r["base"]),
                                                          _as_metrics(a), name, t).items()})
    out.update({f"{k} (pooled)": v for k, v in not_run_targets(list(r), name, t).items()})
    out[f"format_compliance >= {t['format_compliance_min']} in every run, arm and condition"] = all(
        (m.get("format_compliance", {}).get(c) or 0) >= t["format_compliance_min"]
        for s in runs for m in s["real"].values() for c in CONDS)
    return out


# -- the table -------------------------------------------------------------------------------------
def _spread_rows(by_arm: dict, arms: list[str]) -> list[list]:
    rows = []
    for a in arms:
        for k, s in by_arm[a]["per_seed"].items():
            fmt = times if k == "paired_ratio" else pp
            pooled = by_arm[a]["paired"]["paired_ratio"] if k == "paired_ratio" else by_arm[a]["minus_base"][k]
            seed = {"value": s.get("mean"), "ci": s.get("seed_ci")}
            rows.append([arm_label(a), k, with_ci(pooled, fmt), with_ci(seed, fmt) if s.get("mean") is not None
                         else "–", fmt(s["min"]), fmt(s["max"]), s["worst_seed"]])
    return rows


def pooled_table(result: dict, decision_lines: list[str] | tuple = ()) -> str:
    """``pooled_table.md`` of :func:`pooled_result`'s ``result``, with ``decision_lines`` (the decision rule's section,
    :func:`demos.real.decision.lines`) before the targets."""
    arm = result["checked_arm"]
    parts = [f"Pooled over seeds {', '.join(map(str, result['seeds']))} ({result['split']} items); item-level "
             f"bootstrap stratified by seed, {result['n_boot']} replicates (seed {result['boot_seed']}), "
             f"{result['level']:.0%} percentile intervals; targets checked on {arm_label(arm)}.", ""]
    prov = result.get("provenance")
    parts += [provenance_line(prov), ""] + ([result["provenance_note"], ""] if result.get("provenance_note") else [])
    for key, by_arm in result["sets"].items():
        what = SETS[key][0].upper() + SETS[key][1:]
        rows = [[arm_label(a), e["n_items"], *(with_ci(e[c]) for c in CONDS), with_ci(e["sc2w"]),
                 with_ci(e["situated_faithfulness"]) if "situated_faithfulness" in e else "–",
                 f"{with_ci(e['unknown_correct_accuracy'])} (n={e['n_unknown']})"] for a, e in by_arm.items()]
        parts += [f"**{what}, pooled** (SF: situated faithfulness, CR-DPO's mean of the correct and misleading "
                  "accuracy)", "", md_table(["arm", "items", *CONDS, "SC2W", "SF", "unknown correct"], rows), ""]
        trained_arms = [a for a in by_arm if trained(a)]
        rows = [[arm_label(a), *(with_ci(by_arm[a]["minus_base"][k], pp) for k in DIFFS),
                 with_ci(by_arm[a]["minus_base"]["situated_faithfulness"], pp)
                 if "situated_faithfulness" in by_arm[a]["minus_base"] else "–"] for a in trained_arms]
        parts += [f"**{what}: arm - base (pooled, paired by item)**", "",
                  md_table(["arm", *CONDS, "unknown correct", "SC2W", "SF"], rows), ""]
        rows = []
        for a in trained_arms:
            p = by_arm[a]["paired"]
            rows.append([arm_label(a), p["paired_n"], p["kept"], p["lost"], p["gained"], p["still_switched"],
                         with_ci(p["paired_sc2w"]), pct(p["base_paired_sc2w"]["value"]),
                         with_ci(p["paired_ratio"], times)])
        parts += [f"**{what}: paired SC2W on the base's clean-correct items** (kept: both resist; lost: the base "
                  "resists, the arm switches; gained: the base switches, the arm resists)", "",
                  md_table(["arm", "base clean-correct", "kept", "lost", "gained", "still switched", "paired SC2W",
                            "base SC2W", "ratio"], rows), ""]
        parts += [f"**{what}: per-seed spread and the seed-level interval** (arm - base on each seed, the paired SC2W "
                  f"ratio; their mean over the {len(result['seeds'])} trained runs with a {result['level']:.0%} "
                  "Student-t interval, beside the pooled value and its item bootstrap)", "",
                  md_table(["arm", "metric", "pooled [item bootstrap]", "seed mean [t interval]", "min", "max",
                            "worst seed"], _spread_rows(by_arm, trained_arms)), ""]
    parts += pooled_nq_swap.pooled_lines(result.get(pooled_nq_swap.KEY), result["level"])
    parts += list(decision_lines)  # issue 60: each target on its one-sided 95% bound (demos.real.decision.lines)
    parts += [f"**Targets ({arm_label(arm)})**", ""]
    parts += [f"- {k}: {verdict(ok)}" for k, ok in result["targets"].items()]
    return "\n".join(parts) + "\n"


def pooled_result(runs: list[dict], arm: str, *, split: str, provenance_note: str | None = None,
                  n_boot: int = 2000, boot_seed: int = 0) -> dict:
    """``pooled.json``: every evaluation set the runs share, pooled (:func:`pool`), NQ-Swap over the runs that
    evaluated it (``nq_swap``: :func:`demos.real.pooled_nq_swap.pooled_runs`; the others "not run"), and the targets
    of ``arm`` (:func:`check_pooled_targets`). Reads every item file before computing anything."""
    keys = [k for k in SETS if all(k in r for r in runs)]
    feats = {k: {r["seed"]: seed_features(r, k) for r in runs} for k in keys}
    nq = pooled_nq_swap.pooled_runs(runs, n_boot=n_boot, boot_seed=boot_seed)  # the runs that evaluated NQ-Swap
    sets = {k: pool(feats[k], n_boot=n_boot, boot_seed=boot_seed) for k in keys}
    if arm not in sets["real"]:
        raise DataError(f"arm {arm!r} is not in every run (pooled arms: {', '.join(sets['real'])})")
    return {"split": split, "seeds": sorted(r["seed"] for r in runs), "runs": [r["_dir"] for r in runs],
            "demo": runs[0].get("demo"), "size": runs[0].get("size"),
            "knowledge_labels": runs[0].get("knowledge_labels"),
            "items": {str(r["seed"]): r.get("items") for r in runs},
            "provenance": runs[0].get("provenance"), "provenance_note": provenance_note, "n_boot": n_boot,
            "boot_seed": boot_seed, "level": CI_LEVEL, "checked_arm": arm, "sets": sets,
            pooled_nq_swap.KEY: nq,
            "targets": check_pooled_targets(sets, arm, runs, nq=nq)}
