"""NQ-Swap in the real demos (issue 52, item 4; docs/nq_swap.md#in-the-demos): an outside benchmark for the base and
every arm, beside the held-out items and the held-out relation of the facts set.

With ``real.nq_swap_questions`` N > 0 (None: the demo's own, ``demos.config.DEMOS``: 0 for the main job, 300 for
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
them. The seed tool's table (:func:`seed_rows`, "not run" rows for the runs without NQ-Swap) and its NQ-Swap
frontier (:func:`change_from_base`: each arm's change in p_sub, the exact match on the substituted passage, against
its change in ``em_org_context``) read the summaries; its pooled numbers come from the runs' items
(:mod:`demos.real.pooled_nq_swap`).

``real.split=dev`` leaves NQ-Swap out: it has no dev part, and no setting is chosen on it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from selectrust.core.errors import ConfigError
from trainer.runtime.stage import Stage

from .arms import ARMS, BASE, trained
from .arms import label as arm_label
from eval_hooks.scoring.report_kit import ci_text, pct
from eval_hooks.scoring.report_kit import md_table, pp
from eval_hooks.scoring.report_kit import pct

KEY = "nq_swap"  # summary.json's key, and pooled.json's
PREFIX = "nqswap"  # the evaluation stages: nqswap_<arm>
ROWS_STAGE = "nqswap_rows"
ROWS_FILE = "rows.jsonl"  # in stages/nqswap_rows/
SAMPLE_NAME = "eval_hooks/data/nq_swap_sample.jsonl"  # how summaries and reports name the shipped sample
FULL_NAME = "eval_hooks/data/nq_swap/nqswap.zip"  # how they name the shipped whole set (real.nq_swap_data=null)
EPS = 1e-9  # a difference exactly at the limit is met
NOT_RUN = None  # demos.real.report.NOT_RUN: a target whose evaluation did not run


# -- settings and stages ---------------------------------------------------------------------------
def questions(cfg) -> int:
    """The NQ-Swap questions a run evaluates: ``real.nq_swap_questions``, or its demo's own (0: none)."""
    from ..config import DEMOS  # deferred: imports omegaconf

    n = cfg.real.nq_swap_questions
    return int(n) if n is not None else DEMOS[cfg.demo].nq_swap_questions


def on(cfg) -> bool:
    """Whether the run evaluates NQ-Swap: some questions, on the test split."""
    return questions(cfg) > 0 and str(cfg.real.split) == "test"


def data_source(cfg) -> str:
    """``real.nq_swap_data`` (a file made absolute, or a Hub id), or the shipped whole set
    (``eval_hooks/data/nq_swap/nqswap.zip``, issue 60); a ConfigError in one line for a path that is neither an
    existing file nor a Hub id (``owner/name``)."""
    from eval_hooks.families.nq_swap.items import FULL_PATH  # deferred: imports numpy

    data = cfg.real.nq_swap_data
    if data is None:
        return str(FULL_PATH)
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


def draw_seed(cfg) -> int:
    """The seed the NQ-Swap questions are drawn with: ``real.nq_swap_seed`` (0, the default: one fixed set for every
    run seed, issue 60), or the run's seed when it is null (the earlier rule)."""
    s = cfg.real.nq_swap_seed
    return int(cfg.seed) if s is None else int(s)


def rows_step(data: str, n: int, seed: int, max_words: int | None) -> Callable[[Path], dict]:
    """Stage ``nqswap_rows``: the rows of ``n`` questions of ``data`` (drawn with ``seed``, :func:`draw_seed`;
    length-capped) in ``<stage>/rows.jsonl``; returns the build's counts (``source`` named as the setting names
    it)."""
    from eval_hooks.families.nq_swap.items import FULL_PATH, SAMPLE_PATH  # deferred: imports numpy

    def step(out: Path) -> dict:
        from eval_hooks.builders.nq_swap import build_file  # deferred: imports numpy

        stats = build_file(data, Path(out) / ROWS_FILE, items=n, seed=seed, max_context_words=max_words)
        named = {SAMPLE_PATH: f"{SAMPLE_NAME} (the shipped sample)", FULL_PATH: f"{FULL_NAME} (the shipped whole set)"}
        return {**{k: v for k, v in stats.items() if k != "out"},
                "source": named.get(Path(data), stats["source"])}

    return step


def rows_stage(cfg) -> list[Stage]:
    """The step ``nqswap_rows`` when the run evaluates NQ-Swap (:func:`on`), else none."""
    check_settings(cfg)
    if not on(cfg):
        return []
    cap = cfg.real.nq_swap_max_context_words
    return [Stage(ROWS_STAGE, call=rows_step(data_source(cfg), questions(cfg), draw_seed(cfg),
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
    # the base on a fixed set (real.nq_swap_seed set) does not depend on the run's seed (issue 60): seed 0, as the
    # other base stages (demos.real.pipeline.SEEDLESS), so its record is the same in every seed's run
    seedless = adapter is None and cfg.real.nq_swap_seed is not None
    return [Stage(f"{PREFIX}_{arm}", "evaluate", over, inputs=inputs, seed=0 if seedless else None)]


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
    head = ["## NQ-Swap (an outside benchmark)", ""]
    if KEY not in summary:
        return head + ["**Not run** (`real.nq_swap_questions=0`, the main job's default, or `real.split=dev`): its "
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
                     _cell(m, "em_org_context_strict"), _cell(m, "p_sub"), _cell(m, "p_org"), _cell(m, "memorization_ratio"), known.get("n_items", 0),
                     _cell(known, "p_sub") if known else "–", _cell(known, "memorization_ratio") if known else "–"])
    return head + [
        "Natural Questions items with their original passage and the same passage with the answer substituted "
        "(Longpre et al., 2021), as matched MIST quartets judged by the open-answer judge (docs/nq_swap.md). "
        + _sample_line(summary) + "*EM (orig. passage)*: the share of responses to the original passage naming the "
        "original answer after normalisation (containment, `em_org_context`; the target's); *EM strict*: the share "
        "whose first sentence is the answer (`em_org_context_strict`, the literature's exact match). Under the substituted passage: *p_sub* names the "
        "substitute alone, *p_org* the original alone, *MR* the memorization ratio p_org / (p_org + p_sub). *Known*: "
        "the items the base answers closed-book (its estimate, the same for every arm), where resisting the "
        "substituted passage is right; on the others following it is. 95% item-bootstrap intervals.", "",
        md_table(["arm", "items", "EM (orig. passage)", "EM - base", "EM strict", "p_sub", "p_org", "MR", "known items",
                  "known: p_sub", "known: MR"], rows), ""]


def print_lines(summary: dict) -> list[str]:
    """The printed table's NQ-Swap lines (none when it was not evaluated)."""
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
    """The seed table's NQ-Swap rows (from the summaries), in seed order: seed, arm, EM, p_sub, p_org, MR, known
    items, known p_sub and MR; a run without NQ-Swap has "not run" rows (one per arm of its facts set)."""
    rows = []
    for s in sorted(runs, key=lambda r: r["seed"]):
        if KEY not in s:
            rows += [[s["seed"], arm_label(a), *["not run"] * (len(SEED_HEADER) - 2)]
                     for a in ARMS if a in (s.get("real") or {})]
            continue
        for arm in (a for a in ARMS if a in s[KEY]):
            m = _nq(s[KEY][arm])
            k = (m.get("by_knowledge") or {}).get("known") or {}
            rows.append([s["seed"], arm_label(arm), m.get("n_items"), *(pct(m.get(x)) for x in (
                "em_org_context", "p_sub", "p_org", "memorization_ratio")), k.get("n_items", 0), pct(k.get("p_sub")),
                pct(k.get("memorization_ratio"))])
    return rows


SEED_HEADER = ["seed", "arm", "items", "EM (orig. passage)", "p_sub", "p_org", "MR", "known items", "known: p_sub",
               "known: MR"]


def change_from_base(summary: dict, arm: str) -> tuple[float, float] | None:
    """(p_sub - the base's, ``em_org_context`` - the base's) of one arm of one run (the seed tool's NQ-Swap frontier:
    the change in exact match on the substituted passage against the change on the original one); None when the run
    did not evaluate NQ-Swap, that arm or either rate."""
    nq = summary.get(KEY) or {}
    if arm not in nq or BASE.name not in nq:
        return None
    a, b = _nq(nq[arm]), _nq(nq[BASE.name])
    if any(m.get(k) is None for m in (a, b) for k in ("p_sub", "em_org_context")):
        return None
    return a["p_sub"] - b["p_sub"], a["em_org_context"] - b["em_org_context"]
