"""Report of the real-model demo (:mod:`demos.real.pipeline`): tables with CIs, targets, plots, samples, honest notes.

Every number shown comes from the stages' ``metrics.json`` and ``item_scores.jsonl`` (written by ``eval_hooks``)
and the ``metrics.jsonl`` of the arm whose entry plots its training (``curves``: SCOPE's); nothing is recomputed
here except differences for display.
"""

from __future__ import annotations

import json
from pathlib import Path

from eval_hooks.scoring.report_kit import ci_text, figure, md_table, pct, save
from selectrust.conditions import CORRECT, MISLEADING, MIST_CONDITIONS as CONDS

from ..common import draw_scope_training, wall_line
from . import nq_swap
from .arms import ARMS, CHECKED_ARMS, color, held_out_targets, label, sc2w_share
from .prompts import EVAL_SETS
from selectrust.core.io import write_text_atomic

SETS = {"real": "held-out items", "transfer": "held-out relation"}  # summary key -> what it evaluates
# The targets (docs/real_model.md#the-real-model-demo), scored by the project's own parser on held-out items.
TARGETS = {"base_sc2w_min": 0.40, "base_n_clean_correct_min": 40, "sc2w_ratio_max": 0.5, "accuracy_drop_max": 0.03,
           "unknown_correct_drop_max": 0.05, "transfer_sc2w_ratio_max": 0.7, "transfer_correct_drop_max": 0.05,
           "format_compliance_min": 0.9,
           # NQ-Swap (issue 52): correct-context exact match; training on facts must not break context use there
           "nq_swap_em_drop_max": 0.05,
           # on every single seed (the pooled table, demos/real/pooled.py)
           "seed_correct_drop_max": 0.06, "seed_unknown_correct_drop_max": 0.10}
# and the wall time per demo: demos.config.DEMOS
SAMPLES_PER_ARM = 5
NOT_RUN = None  # a target whose evaluation set or arm did not run: shown as "not run", never dropped
#: Arms whose own targets (their entries') are among the issue's targets: "not run" when the run did not train them.
REQUIRED_ARMS = ("misleading_only",)


def not_run_targets(ran: list[str], checked_label: str, limits: dict) -> dict[str, None]:
    """The own targets of each :data:`REQUIRED_ARMS` arm not in ``ran`` (the arms a run or pool has), each
    :data:`NOT_RUN` (the names their entries give them)."""
    stub = {"accuracy": {c: 0.0 for c in CONDS}, "sc2w": None, "unknown_correct_accuracy": None}
    out: dict[str, None] = {}
    for name in (a for a in REQUIRED_ARMS if a not in ran):
        own = ARMS.get(name).targets
        if own is not None:
            out.update({k: NOT_RUN for k in own(stub, stub, stub, checked_label, limits)})
    return out


def paired_sc2w(m: dict) -> tuple[float | None, list | None, str]:
    """``(value, ci, what)`` of an arm's SC2W as the report shows it: the **paired** SC2W (``m["paired"]``: its
    misleading-context failures on the base's clean-correct items; ``demos.real.pipeline.summary_of``) with its
    item-bootstrap interval, or, in a summary written before, the unpaired one (on its own clean-correct items)."""
    p = (m.get("paired") or {}).get("paired_sc2w")
    if p is not None:
        return p.get("value"), p.get("ci"), "paired SC2W"
    return m.get("sc2w"), (m.get("ci") or {}).get("sc2w"), "unpaired SC2W"


def verdict(ok: bool | None, met: str = "met", missed: str = "**missed**") -> str:
    """A target's verdict in words (:data:`NOT_RUN`: "not run")."""
    return "not run" if ok is NOT_RUN else met if ok else missed


def checked_arm(summary: dict) -> str:
    """The arm the targets are checked on: the first of :data:`demos.real.arms.CHECKED_ARMS` the run trained."""
    return next(a for a in CHECKED_ARMS if a in summary["real"])


def check_targets(summary: dict, arm: str | None = None) -> dict[str, bool | None]:
    """Each target of the real demo -> met, for ``arm`` (default :func:`checked_arm`); a target of the held-out
    relation, of NQ-Swap (:func:`demos.real.nq_swap.check_target`) or of misleading-only (:data:`REQUIRED_ARMS`)
    whose evaluation or arm did not run is :data:`NOT_RUN` (None: "not run"), not left out. SC2W targets are on the
    paired ratio (:func:`demos.real.arms.sc2w_share`)."""
    r, t = summary["real"], TARGETS
    arm = arm or checked_arm(summary)
    base, a, name = r["base"], r[arm], label(arm)
    b_sc2w = base.get("sc2w")
    out = {
        f"base SC2W >= {t['base_sc2w_min']:.2f} with n_clean_correct >= {t['base_n_clean_correct_min']}":
            b_sc2w is not None and b_sc2w >= t["base_sc2w_min"] and base["n_clean_correct"] >= t["base_n_clean_correct_min"],
        **held_out_targets(name, a, base, t),
    }
    tr = summary.get("transfer") or {}
    share, what = sc2w_share(tr[arm], tr["base"]) if arm in tr else (None, "paired SC2W")
    ratio_key = f"{name} on the held-out relation: {what} <= {t['transfer_sc2w_ratio_max']} x base"
    correct_key = f"{name} on the held-out relation: correct accuracy >= base - {t['transfer_correct_drop_max']:.2f}"
    if arm in tr:
        out[ratio_key] = share is not None and share <= t["transfer_sc2w_ratio_max"] + 1e-9
        out[correct_key] = tr[arm]["accuracy"][CORRECT] >= tr["base"]["accuracy"][CORRECT] - t[
            "transfer_correct_drop_max"] - 1e-9
    else:  # real.transfer=false: the held-out relation's targets were not checked
        out.update({ratio_key: NOT_RUN, correct_key: NOT_RUN})
    out.update(nq_swap.check_target(summary, arm, name, t["nq_swap_em_drop_max"]))  # not run without NQ-Swap
    for other in _arms(summary):  # the arms' own targets (their entries'), of those that ran
        own = ARMS.get(other).targets
        if own is not None:
            out.update(own(r[other], base, a, name, t))
    out.update(not_run_targets(_arms(summary), name, t))
    out[f"format_compliance >= {t['format_compliance_min']} in every arm and condition"] = all(
        (m["format_compliance"].get(c) or 0) >= t["format_compliance_min"] for m in r.values() for c in CONDS)
    if not summary.get("reused_stages"):  # a continued run's wall time is not the pipeline's
        limit = _demo_kind(summary).wall_seconds_max
        out[f"wall time <= {limit} s"] = summary.get("wall_seconds", 0) <= limit
    return out


def _arms(summary: dict, key: str = "real") -> list[str]:
    return [a for a in ARMS if a in summary.get(key, {})]


def print_table(summary: dict) -> None:
    for key, what in SETS.items():
        if key not in summary:
            continue
        r, names = summary[key], _arms(summary, key)
        print(f"\n[demo] SmolLM2-135M-Instruct, matched evaluation on the {what} ({run_kind(summary)})")
        print("  " + f"{'metric':<26}" + "".join(f"{label(n):>17}" for n in names))
        for c in CONDS:
            print("  " + f"{'accuracy ' + c:<26}" + "".join(f"{pct(r[n]['accuracy'][c]):>17}" for n in names))
        print("  " + f"{paired_sc2w(r['base'])[2]:<26}" + "".join(f"{pct(paired_sc2w(r[n])[0]):>17}" for n in names))
        print("  " + f"{'SC2W / base':<26}" + "".join(f"{_share(r[n], r['base']):>17}" for n in names))
        print("  " + f"{'n_clean_correct':<26}" + "".join(f"{r[n]['n_clean_correct']:>17}" for n in names))
        print("  " + f"{'unknown_correct_accuracy':<26}" + "".join(
            f"{pct(r[n].get('unknown_correct_accuracy')):>17}" for n in names))
        print("  " + f"{'min format_compliance':<26}" + "".join(
            f"{pct(min(r[n]['format_compliance'].values())):>17}" for n in names))
    for line in nq_swap.print_lines(summary):
        print(line)
    targets = summary.get("targets") or check_targets(summary)
    print(f"\n[demo] targets ({label(checked_arm(summary))}): "
          + "; ".join(f"{k}: {verdict(v, 'ok', 'MISSED')}" for k, v in targets.items()))


def _share(m: dict, base: dict) -> str:
    value = sc2w_share(m, base)[0]
    return "–" if value is None else f"{value:.2f}×"


def _demo_kind(summary: dict):
    from ..config import DEMOS  # deferred: imports omegaconf

    return DEMOS.get(summary.get("demo", "real"))


def run_kind(summary: dict) -> str:
    """Which of the two real demos the summary is of, and on which facts set, in words."""
    return f"{_demo_kind(summary).what}, on the {summary.get('size', 'small')} facts set"


def _split_line(summary: dict) -> str:
    """Which items the report shows (``real.split``; a summary written before the key existed is of the test
    items)."""
    sample = ((summary.get("items") or {}).get("real") or {}).get("sample")
    extra = (f" Held-out items: a fixed sample of {sample['items']} of {sample['from']} (per relation "
             f"{sample['per_relation']}, seed {sample['seed']}: `real.heldout_items`)." if sample else "")
    if summary.get("split", "test") == "dev":
        return ("Items: **dev** (`facts_dev.jsonl`, `facts_transfer_dev.jsonl`), for choosing settings; not the "
                "test items." + extra)
    return "Items: **test** (`facts_heldout.jsonl`, `facts_transfer.jsonl`)." + extra


def situated_faithfulness(m: dict) -> float | None:
    """CR-DPO's situated faithfulness of a run's metrics: the mean of its accuracy under the correct and the
    misleading context (the metrics' own value; computed from the accuracies for a summary from before it)."""
    if m.get("situated_faithfulness") is not None:
        return m["situated_faithfulness"]
    acc = m.get("accuracy") or {}
    if acc.get(CORRECT) is None or acc.get(MISLEADING) is None:
        return None
    return (acc[CORRECT] + acc[MISLEADING]) / 2.0


def _table(summary: dict, key: str = "real") -> str:
    r, names = summary[key], _arms(summary, key)
    rows = []
    for c in CONDS:
        rows.append([f"accuracy {c}", *(f"{pct(r[n]['accuracy'][c])} {ci_text(r[n]['ci']['accuracy'][c])}"
                                        for n in names)])
    paired = [paired_sc2w(r[n]) for n in names]
    rows.append([f"**{paired[0][2]}** (lower is better)", *(f"{pct(v)} {ci_text(ci)}" for v, ci, _ in paired)])
    shares = []
    for n in names:
        ci = ((r[n].get("paired") or {}).get("paired_ratio") or {}).get("ci")
        shares.append(_share(r[n], r["base"]) + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else ""))
    rows.append([f"{paired[0][2]} / the base's (the target's ratio)", *shares])
    if any(r[n].get("paired") for n in names):
        rows.append(["base clean-correct items (paired SC2W's denominator)",
                     *(str(r[n]["paired"]["paired_n"]) if r[n].get("paired") else "–" for n in names)])
        rows.append(["SC2W on its own clean-correct items (unpaired)",
                     *(f"{pct(r[n].get('sc2w'))} {ci_text(r[n]['ci'].get('sc2w'))}" for n in names)])
    rows.append(["n_clean_correct (unpaired SC2W's denominator)", *(str(r[n]["n_clean_correct"]) for n in names)])
    rows.append(["situated faithfulness (CR-DPO's SF: mean of correct and misleading accuracy; higher is better)",
                 *(f"{pct(situated_faithfulness(r[n]))} {ci_text((r[n].get('ci') or {}).get('situated_faithfulness'))}"
                   for n in names)])
    rows.append(["unknown_correct_accuracy", *(pct(r[n].get("unknown_correct_accuracy")) for n in names)])
    for c in CONDS:
        rows.append([f"format_compliance {c}", *(pct(r[n]["format_compliance"][c]) for n in names)])
    for c in CONDS:  # the unparsed rows by kind (eval_hooks/FORMATS.md): "–" for a summary from before the count
        rows.append([f"no answer / hedged / multiple {c}",
                     *(" / ".join(str(r[n].get(k, {}).get(c, "–")) for k in ("no_answer", "hedged", "multiple"))
                       for n in names)])
    return md_table([SETS[key], *(label(n) for n in names)], rows)


def _slice_tables(summary: dict) -> list[str]:
    """Per relation and per channel (the metrics' ``slices``): SC2W and correct-context accuracy of every arm."""
    lines = []
    for key in SETS:
        names = _arms(summary, key)
        for by in ("relation", "channel"):
            values = sorted({v for n in names for v in summary[key][n].get("slices", {}).get(by, {})})
            if not values:
                continue
            rows = []
            for v in values:
                cells = []
                for n in names:
                    m = summary[key][n]["slices"][by].get(v)
                    cells.append("–" if m is None else f"{pct(m.get('sc2w'))} / {pct(m['accuracy'][CORRECT])}")
                n_items = summary[key]["base"]["slices"][by].get(v, {}).get("n_items")
                rows.append([f"{v} ({n_items} items)", *cells])
            lines += [f"**{SETS[key]}, per {by}** (SC2W on each arm's own clean-correct items, unpaired / "
                      "correct-context accuracy)", "",
                      md_table([by, *(label(n) for n in names)], rows), ""]
    return lines


def _knowledge_lines(summary: dict) -> list[str]:
    """The knowledge estimate's quality (``summary.knowledge_quality``): AUC, ECE and accuracy per label."""
    kq = summary.get("knowledge_quality") or {}
    rows = []
    for key, by_field in kq.items():
        for field, q in by_field.items():
            acc = q.get("accuracy", {})
            rows.append([SETS.get(key, key), q["score"], q["condition"], q["items"], q["positives"],
                         "–" if q.get("auc") is None else f"{q['auc']:.3f}",
                         "–" if q.get("ece") is None else f"{q['ece']:.3f}",
                         ", ".join(f"{lab} {q['counts'][lab]} ({pct(acc.get(lab))})" for lab in q["counts"])])
    if not rows:
        return []
    return ["## The knowledge estimate", "",
            "How well the base's knowledge estimate predicts its own greedy correctness on the evaluated items "
            "(`eval_hooks.knowledge.knowledge_quality`): ROC AUC and expected calibration error of the score, and "
            "items per label with the base's accuracy on them in the graded condition. `score` is what the labels "
            "threshold. Graded on the clean rows it sees the graded answer itself (with `k=1` it is that answer, "
            "AUC 1 by construction; `combined` includes it, so its AUC flatters it); `clean_accuracy` is the k "
            "sampled answers alone. Graded on the irrelevant-context rows, it asks what the estimate is for: whether "
            "the base keeps the fact beside a distracting text.", "",
            md_table(["items", "ranked by", "graded on", "items", "correct", "AUC", "ECE",
                      "label: items (accuracy)"], rows), ""]


def _stage_time_lines(summary: dict) -> list[str]:
    times = summary.get("stage_seconds", {})
    if not times:
        return []
    total = sum(times.values()) or 1.0
    rows = [[k, f"{v:.0f}", pct(v / total, 0)] for k, v in sorted(times.items(), key=lambda kv: -kv[1])]
    return ["## Stage times", "", wall_line(summary), "", md_table(["stage", "seconds", "share"], rows), ""]


def _plots(summary: dict, out: Path) -> list[str]:
    import matplotlib  # deferred: imports matplotlib

    matplotlib.use("Agg", force=True)
    r, names = summary["real"], _arms(summary)
    fig, (ax, ax2) = figure(10, 3.8, ncols=2, gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(names)
    for j, n in enumerate(names):
        vals = [r[n]["accuracy"][c] for c in CONDS]
        cis = [r[n]["ci"]["accuracy"][c] for c in CONDS]
        xs = [i + (j - (len(names) - 1) / 2) * width for i in range(len(CONDS))]
        err = [[max(0.0, v - lo) for v, (lo, _) in zip(vals, cis)], [max(0.0, hi - v) for v, (_, hi) in zip(vals, cis)]]
        ax.bar(xs, vals, width, yerr=err, capsize=2, label=label(n))
    ax.set_xticks(range(len(CONDS)), CONDS)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("accuracy (held-out facts, 95% CI)")
    ax.legend(fontsize=8, loc="upper left", ncols=2)
    paired = [paired_sc2w(r[n]) for n in names]
    sc = [v or 0 for v, _, _ in paired]
    ci = [c or (v, v) for (_, c, _), v in zip(paired, sc)]
    ax2.bar([label(n) for n in names], sc, color="#C44E52", capsize=3,
            yerr=[[max(0.0, v - lo) for v, (lo, _) in zip(sc, ci)], [max(0.0, hi - v) for v, (_, hi) in zip(sc, ci)]])
    ax2.set_ylim(0, 1.05)
    ax2.set_title(f"{paired[0][2]} (lower is better)", fontsize=9)
    ax2.tick_params(axis="x", labelrotation=30, labelsize=7)
    files = {"conditions": save(fig, out, "real_conditions.png"), "tradeoff": _tradeoff_plot(summary, out)}

    curves = next((n for n in _arms(summary) if ARMS.get(n).curves), None)  # the arm whose training is plotted
    metrics_path = out / "stages" / str(curves) / "metrics.jsonl"
    if curves is not None and metrics_path.exists():
        fig, (ax, ax2) = figure(10, 3.2, ncols=2)
        draw_scope_training(ax, ax2, metrics_path)
        files["training"] = save(fig, out, "real_training.png")
    return files


def _tradeoff_plot(summary: dict, out: Path) -> str:
    """Paired SC2W (:func:`paired_sc2w`) against correct-context accuracy, one point per arm (the base included), on
    the held-out items and on the held-out relation."""
    fig, ax = figure(8, 4.2)
    what = "SC2W"
    for key, marker in zip(SETS, ("o", "^")):
        for n in _arms(summary, key):
            m = summary[key][n]
            x, _, what = paired_sc2w(m)
            if x is None:
                continue
            ax.scatter(x, m["accuracy"][CORRECT], marker=marker, color=color(n), s=45,
                       label=f"{label(n)} ({SETS[key]})")
            sf = situated_faithfulness(m)  # CR-DPO's SF beside SC2W (issue 60)
            ax.annotate(label(n) + (f" (SF {pct(sf)})" if sf is not None else ""), (x, m["accuracy"][CORRECT]),
                        fontsize=7, xytext=(4, 3), textcoords="offset points")
    ax.set_xlabel(f"{what} (lower is better)")
    ax.set_ylabel("correct-context accuracy (higher is better)")
    ax.set_xlim(0, 1.05)
    ax.set_title("Selective trust trade-off (o held-out items, ^ held-out relation)", fontsize=9)
    ax.legend(fontsize=6, loc="center left", bbox_to_anchor=(1.01, 0.5))
    return save(fig, out, "real_tradeoff.png")


def _read_rows(out: Path, arm: str, prefix: str = "eval") -> list[dict]:
    path = out / "stages" / f"{prefix}_{arm}" / "item_scores.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def sample_responses(out: Path, arm: str, k: int = SAMPLES_PER_ARM, condition: str = MISLEADING,
                     knowledge: str | None = None, prefix: str = "eval") -> list[dict]:
    """``k`` rows of ``condition`` of one arm's held-out evaluation (the first items in file order, the same items
    for every arm; ``knowledge``: only items the base's estimate labels so): question, context, response, verdict."""
    rows = [row for row in _read_rows(out, arm, prefix) if row["condition"] == condition
            and (knowledge is None or row.get("knowledge") == knowledge)][:k]
    return [{k_: row.get(k_) for k_ in ("item_id", "context", "question", "gold", "wrong_value", "response", "parsed",
                                         "correct")} for row in rows]


def _sample_lines(summary: dict, out: Path) -> list[str]:
    lines, prefix = [], EVAL_SETS[str(summary.get("split", "test"))]["real"][0]
    for title, condition, knowledge, claim in (
            ("misleading context, the same first items for every arm", MISLEADING, None, "context claims"),
            ("correct context on facts the base does not know, the same first items for every arm", CORRECT,
             "unknown", "context says")):
        lines += [f"## Sample responses ({title})", ""]
        for n in _arms(summary):
            rows = [[s["item_id"], s["wrong_value"] if condition == MISLEADING else s["gold"], s["gold"],
                     "`" + (s["response"] or "").replace("|", "/").replace("\n", " ")[:100] + "`",
                     "right" if s["correct"] else "wrong"] for s in sample_responses(out, n, condition=condition,
                                                                                     knowledge=knowledge, prefix=prefix)]
            if rows:
                lines += [f"**{label(n)}**", "", md_table(["item", claim, "gold", "response", "verdict"], rows), ""]
    return lines


def write_report(summary: dict, out: Path) -> Path:
    out = Path(out)
    plots = _plots(summary, out)
    m = summary.get("mining", {})
    kn = m.get("knowledge", {})
    targets = summary.get("targets") or check_targets(summary)
    lines = [f"# selectrust real-model demo: SmolLM2-135M-Instruct on GeoNames facts (seed {summary['seed']})", "",
             f"This is **{run_kind(summary)}**.", "", _split_line(summary), "", wall_line(summary), "",
             "## Matched 4-condition evaluation on held-out facts", "",
             "Held-out items are countries (and their cities) never seen in mining or training. Accuracy per "
             "condition with a 95% bootstrap CI over items; SC2W is the share of clean-correct items that switch "
             "to a wrong answer under the misleading context. The **paired** SC2W (the targets' and the plots') "
             "counts every arm on the base's clean-correct items, one denominator for all: the share of them the "
             "arm gets wrong under the misleading context; the unpaired one counts each arm on its own "
             "clean-correct items. `unknown_correct_accuracy`: correct-context accuracy on the items the base's "
             "knowledge estimate labels unknown (it can only answer them from the context).",
             "", _table(summary), "", f"![conditions]({plots['conditions']})", ""]
    if "transfer" not in summary:
        lines += ["## The held-out relation (transfer)", "", "**Not run** (`real.transfer=false`): its targets "
                  "below say \"not run\".", ""]
    if "transfer" in summary:
        lines += ["## The held-out relation (transfer)", "",
                  "A relation no training item uses (`facts_transfer.jsonl`), in held-out context wordings.", "",
                  _table(summary, "transfer"), ""]
    lines += nq_swap.report_lines(summary)
    lines += ["## Trade-off", "", f"![trade-off]({plots['tradeoff']})", ""]
    if "training" in plots:
        lines += [f"![training]({plots['training']})", ""]
    lines += ["## Slices", ""] + _slice_tables(summary) + _knowledge_lines(summary)
    gp = summary.get("grpo_prompts")
    lines += ["## Mining", "",
              f"Knowledge-aware mining on {m.get('items')} training items kept {m.get('kept')} quartets "
              f"(dropped: {m.get('dropped_by_reason')}); knowledge estimate {kn.get('counts')}; unknown pools "
              f"{kn.get('per_pool')}. " + _pools_sentence(summary) + (
                  f" {_grpo_labels(summary)}'s prompts: {gp['rows']} rows, {gp['per_label']} per side (known and "
                  f"unknown training items; of {gp['known']} known, {gp['unknown']} unknown, {gp['uncertain']} "
                  "uncertain)." if gp else ""), "",
              f"## Targets (checked on {label(checked_arm(summary))})", ""]
    lines += [f"- {k}: {verdict(v)}" for k, v in targets.items()] + [""]
    lines += _stage_time_lines(summary) + _sample_lines(summary, out) + _notes(summary)
    path = out / "report.md"
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path


def _pools_sentence(summary: dict) -> str:
    """Which pools of the one pairs file each DPO arm of the run trained on (its entry's ``pools``)."""
    training = summary.get("training") or {}
    runs = [(n, training[n]) for n in _arms(summary) if n in training]
    parts = [f"{label(n)} on {ARMS.get(n).pools}" for n, t in runs if t.get("recipe") == "dpo" and ARMS.get(n).pools]
    return f"Every DPO arm trains on this one pairs file: {', '.join(parts)}." if parts else (
        "Every DPO arm trains on this one pairs file.")


def _grpo_labels(summary: dict) -> str:
    training = summary.get("training") or {}
    names = [label(n) for n in _arms(summary) if (training.get(n) or {}).get("recipe") == "grpo"]
    return " and ".join(names) or "GRPO"


#: GRPO's prompt rows (``real.grpo_rows``, ``summary.json``'s ``training.<arm>.rows``), in words.
GRPO_ROWS_WORDS = {
    "informative": "the rows whose reward can vary under the base (known items under the misleading and irrelevant "
                   "contexts, unknown items under the correct one)",
    "all": "known and unknown items under all four contexts",
}


def _steps(t: dict) -> str:
    return "an unrecorded number of" if t.get("steps") is None else str(t["steps"])


def what_ran(summary: dict) -> list[str]:
    """One phrase per trained arm of the run, from ``summary.json``'s ``training`` (runs before it: the arms
    alone)."""
    training = summary.get("training") or {}
    out = []
    for n in (a for a in _arms(summary) if ARMS.get(a).train is not None):
        t = training.get(n)
        if t is None:
            out.append(label(n))
            continue
        how = f"{_steps(t)} {str(t.get('recipe')).upper()} steps" + (f" ({t['algo']})" if t.get("algo") else "")
        if t.get("continues"):
            how += f" continuing {label(t['continues'])}"
        if t.get("rows"):
            how += f", prompt rows `{t['rows']}`"
        out.append(f"{label(n)}: {how}")
    return out


def _dpo_phrase(summary: dict) -> str:
    """"30 DPO steps" (the DPO arms' steps, a range where they differ), from ``summary.json``'s ``training``."""
    steps = sorted({t["steps"] for t in (summary.get("training") or {}).values()
                    if t.get("recipe") == "dpo" and t.get("steps") is not None})
    if not steps:
        return "DPO training (its step count is not in this summary)"
    return f"{steps[0]} DPO steps" if len(steps) == 1 else f"{steps[0]}-{steps[-1]} DPO steps"


def _arm_notes(summary: dict) -> list[str]:
    """The sentences about the arms this run trained: each arm's own note (its entry's), and what each GRPO arm's
    reward was given."""
    training = summary.get("training") or {}
    out = []
    for n in _arms(summary):
        t = training.get(n) or {}
        note = ARMS.get(n).note if t else None
        if note:
            out.append(note.format(label=label(n)))
        if t.get("recipe") == "grpo":
            rows = GRPO_ROWS_WORDS.get(t.get("rows"), f"its prompt rows (`{t.get('rows')}`)")
            start = f"the {label(t['continues'])} adapter" if t.get("continues") else "the base"
            out.append(f"{label(n)} continues {start} for {_steps(t)} GRPO steps with an outcome reward (the answer is "
                       f"right) on {rows}, which rewards using a correct context and resisting a misleading one "
                       "alike.")
    return out


def _notes(summary: dict) -> list[str]:
    ran = what_ran(summary)
    return ["## What this shows, and what it does not", "",
            "- It shows, on a real pretrained instruct model and real facts, the effect SCOPE is about: the base "
            f"follows a confident wrong context on most facts it knows (SC2W), and {_dpo_phrase(summary)} on its own "
            "mined answers make it keep its answer, while the per-condition table shows what happened to clean, "
            "correct-context and irrelevant-context accuracy. Every verdict comes from the project's "
            "deterministic short-answer parser (eval_hooks/FORMATS.md), not from a judge model.",
            f"- This run trained {len(ran)} arm{'s' if len(ran) != 1 else ''}: " + "; ".join(ran) + ".",
            "- Where a correct context is the only way to the answer (facts the base does not know: the "
            "`unknown_correct_accuracy` row), SCOPE trained on facts the model knows also learns some of \"ignore "
            "context\". " + " ".join(_arm_notes(summary)) + " Compare each arm's `unknown_correct_accuracy` with its "
            "SC2W.",
            "- It does not show the paper's absolute numbers or anything about larger models: the model has "
            "135M parameters, held-out sets are small (CIs above are wide), and the run is one seed. The evidence "
            "across seeds is a pooled table of several runs on the test items (`python -m demos.real.seeds RUN... "
            "--out DIR --split test`; seeds 0-4: docs/real_model_history.md#dev-and-test-what-was-chosen-where).",
            "- Held-out items use context wordings no training row uses, and the held-out relation is one no "
            "training item uses; the channels (answer key, document, note, snippet, expert) are the same five."]
