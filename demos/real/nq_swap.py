"""NQ-Swap in the real demos (issue 52, item 4; docs/nq_swap.md#in-the-demos): an outside benchmark for the base and
every arm, beside the held-out items and the held-out relation of the facts set.

With ``real.nq_swap_questions`` N > 0 (None: the demo's own, ``demos.config.DEMOS``: 0 for the quick demo, 40 for
the full experiment) and ``real.split=test``, the demo adds these stages (:func:`rows_stage`, :func:`evaluation`):

- ``nqswap_rows``: a step that builds the MIST rows of N questions of ``real.nq_swap_data`` (None: the shipped sample
  ``eval_hooks/data/nq_swap_sample.jsonl``), drawn with the run's seed, passages of at most
  ``real.nq_swap_max_context_words`` words (:func:`eval_hooks.builders.nq_swap.build_file`), into
  ``stages/nqswap_rows/rows.jsonl``: every model is evaluated on those rows;
- ``nqswap_base``: the base on them (``eval=nq_swap``) with its knowledge estimate (``real.stages.knowledge``: one
  greedy closed-book answer, known = answered right), whose ``knowledge.jsonl`` labels the items of every arm's
  evaluation, so the known / unknown split is the base's, the same for every arm;
- ``nqswap_<arm>``: each arm's adapter on the same rows, split by the base's labels.

``summary.json``'s ``nq_swap.<arm>`` is that stage's ``metrics.json`` (MIST's metrics and NQ-Swap's:
``nq_swap.em_org_context``, ``p_sub``, ``p_org``, ``memorization_ratio``, each per knowledge label, with
item-bootstrap intervals; :mod:`eval_hooks.families.nq_swap.metrics`); ``items.nq_swap`` the rows' file and build
counts. The report's table (:func:`report_lines`) and the target (:func:`check_target`: the checked arm's
correct-context exact match ``em_org_context`` >= the base's - 0.05; not run when NQ-Swap was not evaluated) read
them. The seed tool pools the runs' ``stages/nqswap_<arm>/item_scores.jsonl`` like the held-out relation
(:func:`pool`: item-level bootstrap stratified by seed, each arm paired with the base on the same items, and the
per-seed spread with its Student-t interval).

``real.split=dev`` leaves NQ-Swap out: it has no dev part, and no setting is chosen on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import numpy as np

from selectrust.conditions import CLEAN, CORRECT, MISLEADING
from selectrust.core.errors import DataError
from trainer.config import ConfigError
from trainer.core.stages import Stage

from .arms import ARMS, BASE, trained
from .arms import label as arm_label

KEY = "nq_swap"  # summary.json's key, and pooled.json's
PREFIX = "nqswap"  # the evaluation stages: nqswap_<arm>
ROWS_STAGE = "nqswap_rows"
ROWS_FILE = "rows.jsonl"  # in stages/nqswap_rows/
SAMPLE_NAME = "eval_hooks/data/nq_swap_sample.jsonl"  # how summaries and reports name the shipped sample
#: Per-item 0/1 counts of one model on one item (:func:`item_features`): the item, its correct-passage exact match,
#: which answer it names under the substituted passage (the original alone, the substitute alone), and the same on
#: the items the base's estimate labels known.
FEATURES = ("n", "em", "org", "sub", "known", "known_org", "known_sub")
_F = {f: i for i, f in enumerate(FEATURES)}
#: The rates pooled, in the order the tables show them (``known_*``: on the items the base knows).
RATES = ("em_org_context", "p_sub", "p_org", "memorization_ratio", "known_p_sub", "known_p_org",
         "known_memorization_ratio")
DIFFS = ("em_org_context", "p_sub")  # arm - base, pooled and per seed
EPS = 1e-9  # a difference exactly at the limit is met
NOT_RUN = None  # demos.real.report.NOT_RUN: a target whose evaluation did not run


# -- settings and stages ---------------------------------------------------------------------------
def questions(cfg) -> int:
    """The NQ-Swap questions a run evaluates: ``real.nq_swap_questions``, or its demo's own (0: none)."""
    from ..config import DEMOS

    n = cfg.real.nq_swap_questions
    return int(n) if n is not None else DEMOS[cfg.demo].nq_swap_questions


def on(cfg) -> bool:
    """Whether the run evaluates NQ-Swap: some questions, on the test split."""
    return questions(cfg) > 0 and str(cfg.real.split) == "test"


def data_source(cfg) -> str:
    """``real.nq_swap_data`` (a file made absolute, or a Hub id), or the shipped sample; a ConfigError in one line
    for a path that is neither an existing file nor a Hub id (``owner/name``)."""
    from eval_hooks.families.nq_swap.items import SAMPLE_PATH

    data = cfg.real.nq_swap_data
    if data is None:
        return str(SAMPLE_PATH)
    p = Path(str(data)).expanduser()
    if p.exists():
        return str(p.resolve())
    hub = str(data).count("/") == 1 and not str(data).startswith((".", "/", "~")) and p.suffix.lower() not in (
        ".jsonl", ".json", ".parquet", ".pq", ".zip")
    if not hub:
        raise ConfigError(f"real.nq_swap_data={data!r}: no such file, nor a Hub id (owner/name[@revision])")
    return str(data)


def check_settings(cfg) -> None:
    """A ConfigError in one line for NQ-Swap settings that cannot run (before any stage)."""
    n = questions(cfg)
    if n < 0 or n == 1:
        raise ConfigError(f"real.nq_swap_questions={n}: 0 (off) or at least 2 (an item's irrelevant passage is "
                          "another question's)")
    cap = cfg.real.nq_swap_max_context_words
    if cap is not None and cap < 1:
        raise ConfigError(f"real.nq_swap_max_context_words={cap}: at least 1, or null (no cap)")
    if n:
        data_source(cfg)


def rows_step(data: str, n: int, seed: int, max_words: int | None) -> Callable[[Path], dict]:
    """Stage ``nqswap_rows``: the rows of ``n`` questions of ``data`` (seeded, length-capped) in
    ``<stage>/rows.jsonl``; returns the build's counts (``source`` named as the setting names it)."""
    from eval_hooks.families.nq_swap.items import SAMPLE_PATH

    def step(out: Path) -> dict:
        from eval_hooks.builders.nq_swap import build_file

        stats = build_file(data, Path(out) / ROWS_FILE, items=n, seed=seed, max_context_words=max_words)
        shipped = Path(data) == SAMPLE_PATH
        return {**{k: v for k, v in stats.items() if k != "out"},
                "source": f"{SAMPLE_NAME} (the shipped sample)" if shipped else stats["source"]}

    return step


def rows_stage(cfg) -> list[Stage]:
    """The step ``nqswap_rows`` when the run evaluates NQ-Swap (:func:`on`), else none."""
    check_settings(cfg)
    if not on(cfg):
        return []
    cap = cfg.real.nq_swap_max_context_words
    return [Stage(ROWS_STAGE, call=rows_step(data_source(cfg), questions(cfg), int(cfg.seed),
                                             None if cap is None else int(cap)))]


def evaluation(cfg, arm: str, adapter: str | None = None) -> list[Stage]:
    """``nqswap_<arm>`` when the run evaluates NQ-Swap: the base (``adapter`` None: with its knowledge estimate, the
    labels of every arm's items) or an arm's adapter (split by the base's labels), on the rows of ``nqswap_rows``."""
    if not on(cfg):
        return []
    st = cfg.real.stages
    over = ["model=smollm2_135m", "eval=nq_swap", *st.evaluate, "eval.max_rows=null"]
    inputs = {"model.path": "convert", "eval.path": f"{ROWS_STAGE}/{ROWS_FILE}"}
    if adapter is None:
        over += [*st.knowledge, "knowledge.enabled=true"]
    else:
        inputs.update({"adapter_path": adapter, "eval.knowledge_path": f"{PREFIX}_base/knowledge.jsonl"})
    return [Stage(f"{PREFIX}_{arm}", "evaluate", over, inputs=inputs)]


def summary_part(cfg, results: dict[str, Any], names: list[str]) -> dict:
    """``summary.json``'s ``nq_swap`` (``{arm: metrics.json}`` of ``names``, the base first) when the run evaluated
    NQ-Swap, else {}."""
    if not on(cfg):
        return {}
    return {KEY: {a: results[f"{PREFIX}_{a}"] for a in names}}


def items_entry(cfg, results: dict[str, Any]) -> dict:
    """``summary.json``'s ``items.nq_swap`` (the rows' file and the build's counts) when NQ-Swap ran, else {}."""
    if not on(cfg):
        return {}
    return {KEY: {"file": f"{ROWS_STAGE}/{ROWS_FILE}", "sample": results.get(ROWS_STAGE)}}


# -- one run: the target and the report -------------------------------------------------------------
def _nq(m: dict) -> dict:
    return m.get("nq_swap") or {}


def target_name(name: str, limit: float) -> str:
    return f"{name} NQ-Swap correct-context exact match >= base - {limit:.2f}"


def check_target(summary: dict, arm: str, name: str, limit: float) -> dict[str, bool | None]:
    """The checked arm's NQ-Swap target: its ``em_org_context`` at least the base's - ``limit``; :data:`NOT_RUN`
    when the run did not evaluate NQ-Swap (or that arm on it)."""
    nq = summary.get(KEY) or {}
    if arm not in nq or BASE.name not in nq:
        return {target_name(name, limit): NOT_RUN}
    a, b = _nq(nq[arm]).get("em_org_context"), _nq(nq[BASE.name]).get("em_org_context")
    return {target_name(name, limit): a is not None and b is not None and a >= b - limit - EPS}


def _cell(per: dict, key: str) -> str:
    from eval_hooks.scoring.report_kit import ci_text, pct

    ci = (per.get("ci") or {}).get(key)
    return pct(per.get(key)) + (f" {ci_text(ci)}" if ci else "")


def _arms(summary: dict) -> list[str]:
    return [a for a in ARMS if a in (summary.get(KEY) or {})]


def _sample_line(summary: dict) -> str:
    s = ((summary.get("items") or {}).get(KEY) or {}).get("sample") or {}
    if not s:
        return ""
    words = s.get("context_words") or {}
    return (f"{s.get('items')} questions ({s.get('rows')} rows) of {s.get('source')}, drawn with seed {s.get('seed')}"
            f" from the {s.get('kept_questions')} it keeps (passages of at most {s.get('max_context_words')} words, "
            f"answers checked; here {words.get('min')}-{words.get('max')} words, median {words.get('median')}; "
            f"{s.get('by_channel')}). ")


def report_lines(summary: dict) -> list[str]:
    """The report's NQ-Swap section: per arm, correct-context exact match (and its change from the base), p_sub,
    p_org and the memorization ratio on every item, and p_sub and the memorization ratio on the items the base
    knows, with 95% item-bootstrap intervals; "not run" when NQ-Swap was not evaluated."""
    from eval_hooks.scoring.report_kit import md_table, pp

    head = ["## NQ-Swap (an outside benchmark)", ""]
    if KEY not in summary:
        return head + ["**Not run** (`real.nq_swap_questions=0`, the quick demo's default, or `real.split=dev`): its "
                       "target below says \"not run\" (docs/nq_swap.md#in-the-demos).", ""]
    nq, names = summary[KEY], _arms(summary)
    base_em = _nq(nq[BASE.name]).get("em_org_context")
    rows = []
    for n in names:
        m = _nq(nq[n])
        known = (m.get("by_knowledge") or {}).get("known") or {}
        em = m.get("em_org_context")
        rows.append([arm_label(n), m.get("n_items"), _cell(m, "em_org_context"),
                     "–" if not trained(n) or em is None or base_em is None else pp(em - base_em),
                     _cell(m, "p_sub"), _cell(m, "p_org"), _cell(m, "memorization_ratio"), known.get("n_items", 0),
                     _cell(known, "p_sub") if known else "–", _cell(known, "memorization_ratio") if known else "–"])
    return head + [
        "Natural Questions items with their original passage and the same passage with the answer substituted "
        "(Longpre et al., 2021), as matched MIST quartets judged by the open-answer judge (docs/nq_swap.md). "
        + _sample_line(summary) + "*EM (orig. passage)*: the share of responses to the original passage naming the "
        "original answer (`em_org_context`; the target's). Under the substituted passage: *p_sub* names the "
        "substitute alone, *p_org* the original alone, *MR* the memorization ratio p_org / (p_org + p_sub). *Known*: "
        "the items the base answers closed-book (its estimate, the same for every arm), where resisting the "
        "substituted passage is right; on the others following it is. 95% item-bootstrap intervals.", "",
        md_table(["arm", "items", "EM (orig. passage)", "EM - base", "p_sub", "p_org", "MR", "known items",
                  "known: p_sub", "known: MR"], rows), ""]


def print_lines(summary: dict) -> list[str]:
    """The printed table's NQ-Swap lines (none when it was not evaluated)."""
    from eval_hooks.scoring.report_kit import pct

    if KEY not in summary:
        return []
    nq, names = summary[KEY], _arms(summary)
    out = ["", "[demo] NQ-Swap (outside benchmark)", "  " + f"{'metric':<26}" + "".join(
        f"{arm_label(n):>17}" for n in names)]
    for key, what in (("em_org_context", "EM (orig. passage)"), ("p_sub", "p_sub"), ("p_org", "p_org"),
                      ("memorization_ratio", "memorization ratio")):
        out.append("  " + f"{what:<26}" + "".join(f"{pct(_nq(nq[n]).get(key)):>17}" for n in names))
    known = [((_nq(nq[n]).get("by_knowledge") or {}).get("known") or {}) for n in names]
    out.append("  " + f"{'known: p_sub':<26}" + "".join(f"{pct(k.get('p_sub')):>17}" for k in known))
    return out


def seed_rows(runs: list[dict]) -> list[list]:
    """The seed table's NQ-Swap rows (from the summaries): seed, arm, EM, p_sub, p_org, MR, known items, known
    p_sub and MR."""
    from eval_hooks.scoring.report_kit import pct

    rows = []
    for s in sorted((r for r in runs if KEY in r), key=lambda r: r["seed"]):
        for arm in (a for a in ARMS if a in s[KEY]):
            m = _nq(s[KEY][arm])
            k = (m.get("by_knowledge") or {}).get("known") or {}
            rows.append([s["seed"], arm_label(arm), m.get("n_items"), *(pct(m.get(x)) for x in (
                "em_org_context", "p_sub", "p_org", "memorization_ratio")), k.get("n_items", 0), pct(k.get("p_sub")),
                pct(k.get("memorization_ratio"))])
    return rows


SEED_HEADER = ["seed", "arm", "items", "EM (orig. passage)", "p_sub", "p_org", "MR", "known items", "known: p_sub",
               "known: MR"]


# -- pooled over seeds -----------------------------------------------------------------------------
def item_features(path: Path) -> tuple[list, np.ndarray]:
    """``(item ids, (n_items, len(FEATURES)) 0/1 counts)`` of one ``item_scores.jsonl`` of the nq_swap family (the
    known label: the clean row's ``knowledge``, else its own correctness, as the family's metrics do); a DataError
    naming the file."""
    from eval_hooks.families.mist.metrics import mist_items
    from eval_hooks.families.nq_swap.metrics import misleading_outcome
    from selectrust.core.io import read_records

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
            feats.append([1, bool(r[CORRECT]["correct"]), org, sub, known, known and org, known and sub])
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


def rates(counts: np.ndarray) -> dict[str, np.ndarray]:
    """The :data:`RATES` of summed feature counts (``(..., len(FEATURES))``; leading axes kept, NaN where a
    denominator is 0)."""
    c = {f: counts[..., i].astype(float) for f, i in _F.items()}

    def ratio(num, den):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(den > 0, num / np.where(den > 0, den, 1.0), np.nan)

    return {"em_org_context": ratio(c["em"], c["n"]), "p_sub": ratio(c["sub"], c["n"]),
            "p_org": ratio(c["org"], c["n"]), "memorization_ratio": ratio(c["org"], c["org"] + c["sub"]),
            "known_p_sub": ratio(c["known_sub"], c["known"]), "known_p_org": ratio(c["known_org"], c["known"]),
            "known_memorization_ratio": ratio(c["known_org"], c["known_org"] + c["known_sub"])}


def _value(x) -> float | None:
    return None if np.isnan(x) else float(x)


def pool(per_seed: dict[int, dict[str, np.ndarray]], *, n_boot: int = 2000, boot_seed: int = 0,
         level: float | None = None) -> dict[str, dict]:
    """Pooled NQ-Swap rates per arm (``per_seed``: ``{seed: {arm: features}}``, :func:`seed_features`; arms of every
    seed only) with item-bootstrap intervals stratified by seed (each replicate resamples every seed's items and
    pools them; every arm and the base share the replicate's items), the arm's difference from the base in
    :data:`DIFFS` and its per-seed spread (``per_seed``: by seed, min, max, worst seed, mean and the Student-t
    interval of the mean over the seeds), as ``demos.real.pooled.pool`` does for the facts sets."""
    from eval_hooks.metrics.common import CI_LEVEL, percentile_ci, seed_stratified_sums, t_interval

    level = CI_LEVEL if level is None else level
    arms = [a for a in ARMS if all(a in f for f in per_seed.values())]
    point, boot = seed_stratified_sums(per_seed, arms, BASE.name, n_boot=n_boot, boot_seed=boot_seed)
    base_pt, base_bt = rates(point[BASE.name]), rates(boot[BASE.name])
    out = {}
    for a in arms:
        pt, bt = rates(point[a]), rates(boot[a])
        entry: dict[str, Any] = {k: {"value": _value(pt[k]), "ci": percentile_ci(bt[k], level)} for k in RATES}
        entry["n_items"], entry["n_known"] = int(point[a][_F["n"]]), int(point[a][_F["known"]])
        entry["minus_base"] = {k: {"value": _value(pt[k] - base_pt[k]), "ci": percentile_ci(bt[k] - base_bt[k], level)}
                               for k in DIFFS}
        spread = {}
        for k in DIFFS:
            vals = {}
            for s in sorted(per_seed):
                v = rates(per_seed[s][a].sum(axis=0))[k] - rates(per_seed[s][BASE.name].sum(axis=0))[k]
                if not np.isnan(v):
                    vals[s] = float(v)
            if vals:
                worst = (max if k == "p_sub" else min)(vals, key=vals.get)
                spread[k] = {"by_seed": vals, "min": min(vals.values()), "max": max(vals.values()),
                             "worst_seed": worst, "mean": float(np.mean(list(vals.values()))),
                             "seed_ci": t_interval(list(vals.values()), level)}
        entry["per_seed"] = spread
        out[a] = entry
    return out


def pooled_runs(runs: list[dict], *, n_boot: int, boot_seed: int) -> dict[str, dict] | None:
    """:func:`pool` of the runs' NQ-Swap evaluations when every run has them (``summary.json``'s ``nq_swap``), else
    None. Reads every item file first."""
    if not runs or not all(KEY in r for r in runs):
        return None
    feats = {r["seed"]: seed_features(r) for r in runs}
    return pool(feats, n_boot=n_boot, boot_seed=boot_seed)


def pooled_target(pooled: dict | None, arm: str, name: str, limit: float) -> dict[str, bool | None]:
    """The NQ-Swap target on the pooled point estimate (the arm's ``em_org_context`` - the base's >= -``limit``);
    :data:`NOT_RUN` when the runs did not evaluate NQ-Swap (or that arm)."""
    key = f"{target_name(name, limit)} (pooled)"
    if not pooled or arm not in pooled:
        return {key: NOT_RUN}
    x = pooled[arm]["minus_base"]["em_org_context"]["value"]
    return {key: x is not None and x >= -limit - EPS}


def pooled_lines(pooled: dict | None, n_seeds: int, level: float) -> list[str]:
    """The pooled table's NQ-Swap part: the pooled rates with their intervals, and each trained arm's difference
    from the base (pooled, and the per-seed spread with the seed-level interval)."""
    from eval_hooks.scoring.report_kit import md_table, pct, pp

    if not pooled:
        return []

    def with_ci(x: dict, fmt=pct) -> str:
        ci = x.get("ci")
        return f"{fmt(x['value'])} [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else fmt(x["value"])

    rows = [[arm_label(a), e["n_items"], e["n_known"], *(with_ci(e[k]) for k in RATES)] for a, e in pooled.items()]
    parts = ["**NQ-Swap (an outside benchmark), pooled**", "",
             md_table(["arm", "items", "known", "EM (orig. passage)", "p_sub", "p_org", "MR", "known: p_sub",
                       "known: p_org", "known: MR"], rows), ""]
    rows = []
    for a in (a for a in pooled if trained(a)):
        for k in DIFFS:
            s = pooled[a]["per_seed"].get(k)
            seed = with_ci({"value": s["mean"], "ci": s["seed_ci"]}, pp) if s else "–"
            rows.append([arm_label(a), k, with_ci(pooled[a]["minus_base"][k], pp), seed,
                         pp(s["min"]) if s else "–", pp(s["max"]) if s else "–", s["worst_seed"] if s else "–"])
    parts += [f"**NQ-Swap: arm - base** (pooled, paired by item; per seed, their mean over the {n_seeds} runs with a "
              f"{level:.0%} Student-t interval)", "",
              md_table(["arm", "metric", "pooled [item bootstrap]", "seed mean [t interval]", "min", "max",
                        "worst seed"], rows), ""]
    return parts
