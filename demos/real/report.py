"""Report of the real-model demo (:mod:`demos.real.pipeline`): tables with CIs, targets, plots, samples, honest notes.

Every number shown comes from the stages' ``metrics.json`` and ``item_scores.jsonl`` (written by ``eval_hooks``)
and the SCOPE run's ``metrics.jsonl``; nothing is recomputed here except differences for display.
"""

from __future__ import annotations

import json
from pathlib import Path

from eval_hooks.report_kit import ci_text, figure, md_table, pct, save
from eval_hooks.vocab import MIST_CONDITIONS as CONDS

from ..common import draw_scope_training

ARMS = ("base", "scope", "misleading_only", "knowledge_aware")
LABEL = {"base": "base", "scope": "SCOPE", "misleading_only": "misleading-only", "knowledge_aware": "knowledge-aware"}
# The targets (docs/real_model.md#the-real-model-demo), scored by the project's own parser on held-out items.
TARGETS = {"base_sc2w_min": 0.40, "base_n_clean_correct_min": 40, "scope_sc2w_ratio_max": 0.5,
           "scope_accuracy_drop_max": 0.03, "knowledge_aware_unknown_correct_drop_max": 0.05,
           "format_compliance_min": 0.9, "wall_seconds_max": 600}
SAMPLES_PER_ARM = 5


def check_targets(summary: dict) -> dict[str, bool]:
    """Each target of the real demo -> met; a target whose arm was not run is left out."""
    r, t = summary["real"], TARGETS
    base, scope = r["base"], r["scope"]
    b_sc2w, s_sc2w = base.get("sc2w"), scope.get("sc2w")
    out = {
        f"base SC2W >= {t['base_sc2w_min']:.2f} with n_clean_correct >= {t['base_n_clean_correct_min']}":
            b_sc2w is not None and b_sc2w >= t["base_sc2w_min"] and base["n_clean_correct"] >= t["base_n_clean_correct_min"],
        f"SCOPE SC2W <= {t['scope_sc2w_ratio_max']} x base":
            b_sc2w is not None and s_sc2w is not None and s_sc2w <= t["scope_sc2w_ratio_max"] * b_sc2w,
    }
    for c in ("clean", "correct", "irrelevant"):
        out[f"SCOPE {c} accuracy >= base - {t['scope_accuracy_drop_max']:.2f}"] = (
            scope["accuracy"][c] >= base["accuracy"][c] - t["scope_accuracy_drop_max"])
    if "misleading_only" in r:
        out["misleading-only correct-context accuracy < SCOPE's"] = (
            r["misleading_only"]["accuracy"]["correct"] < scope["accuracy"]["correct"])
    if "knowledge_aware" in r:
        ka, bu = r["knowledge_aware"].get("unknown_correct_accuracy"), base.get("unknown_correct_accuracy")
        out[f"knowledge-aware unknown_correct_accuracy >= base - {t['knowledge_aware_unknown_correct_drop_max']:.2f}"] = (
            ka is not None and bu is not None and ka >= bu - t["knowledge_aware_unknown_correct_drop_max"])
    out[f"format_compliance >= {t['format_compliance_min']} in every arm and condition"] = all(
        (m["format_compliance"].get(c) or 0) >= t["format_compliance_min"] for m in r.values() for c in CONDS)
    out[f"wall time <= {t['wall_seconds_max']} s"] = summary.get("wall_seconds", 0) <= t["wall_seconds_max"]
    return out


def _arms(summary: dict) -> list[str]:
    return [a for a in ARMS if a in summary["real"]]


def print_table(summary: dict) -> None:
    r, names = summary["real"], _arms(summary)
    print("\n[demo] SmolLM2-135M-Instruct, matched evaluation on held-out facts")
    print("  " + f"{'metric':<26}" + "".join(f"{LABEL[n]:>17}" for n in names))
    for c in CONDS:
        print("  " + f"{'accuracy ' + c:<26}" + "".join(f"{pct(r[n]['accuracy'][c]):>17}" for n in names))
    print("  " + f"{'SC2W':<26}" + "".join(f"{pct(r[n].get('sc2w')):>17}" for n in names))
    print("  " + f"{'n_clean_correct':<26}" + "".join(f"{r[n]['n_clean_correct']:>17}" for n in names))
    print("  " + f"{'unknown_correct_accuracy':<26}" + "".join(
        f"{pct(r[n].get('unknown_correct_accuracy')):>17}" for n in names))
    print("  " + f"{'min format_compliance':<26}" + "".join(
        f"{pct(min(r[n]['format_compliance'].values())):>17}" for n in names))
    targets = summary.get("targets") or check_targets(summary)
    print("\n[demo] targets: " + "; ".join(f"{k}: {'ok' if v else 'MISSED'}" for k, v in targets.items()))


def _table(summary: dict) -> str:
    r, names = summary["real"], _arms(summary)
    rows = []
    for c in CONDS:
        rows.append([f"accuracy {c}", *(f"{pct(r[n]['accuracy'][c])} {ci_text(r[n]['ci']['accuracy'][c])}"
                                        for n in names)])
    rows.append(["**SC2W** (lower is better)", *(f"{pct(r[n].get('sc2w'))} {ci_text(r[n]['ci'].get('sc2w'))}"
                                                  for n in names)])
    rows.append(["n_clean_correct (SC2W's denominator)", *(str(r[n]["n_clean_correct"]) for n in names)])
    rows.append(["unknown_correct_accuracy", *(pct(r[n].get("unknown_correct_accuracy")) for n in names)])
    for c in CONDS:
        rows.append([f"format_compliance {c}", *(pct(r[n]["format_compliance"][c]) for n in names)])
    return md_table(["held-out items", *(LABEL[n] for n in names)], rows)


def _plots(summary: dict, out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg", force=True)
    r, names = summary["real"], _arms(summary)
    fig, (ax, ax2) = figure(10, 3.8, ncols=2, gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(names)
    for j, n in enumerate(names):
        vals = [r[n]["accuracy"][c] for c in CONDS]
        cis = [r[n]["ci"]["accuracy"][c] for c in CONDS]
        xs = [i + (j - (len(names) - 1) / 2) * width for i in range(len(CONDS))]
        err = [[max(0.0, v - lo) for v, (lo, _) in zip(vals, cis)], [max(0.0, hi - v) for v, (_, hi) in zip(vals, cis)]]
        ax.bar(xs, vals, width, yerr=err, capsize=2, label=LABEL[n])
    ax.set_xticks(range(len(CONDS)), CONDS)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("accuracy (held-out facts, 95% CI)")
    ax.legend(fontsize=8, loc="upper left", ncols=2)
    sc = [r[n].get("sc2w") or 0 for n in names]
    ci = [r[n]["ci"].get("sc2w") or (v, v) for n, v in zip(names, sc)]
    ax2.bar([LABEL[n] for n in names], sc, color="#C44E52", capsize=3,
            yerr=[[max(0.0, v - lo) for v, (lo, _) in zip(sc, ci)], [max(0.0, hi - v) for v, (_, hi) in zip(sc, ci)]])
    ax2.set_ylim(0, 1.05)
    ax2.set_title("SC2W (lower is better)", fontsize=9)
    ax2.tick_params(axis="x", labelrotation=30, labelsize=7)
    files = [save(fig, out, "real_conditions.png")]

    metrics_path = out / "stages" / "scope" / "metrics.jsonl"
    if metrics_path.exists():
        fig, (ax, ax2) = figure(10, 3.2, ncols=2)
        draw_scope_training(ax, ax2, metrics_path)
        files.append(save(fig, out, "real_training.png"))
    return files


def sample_responses(out: Path, arm: str, k: int = SAMPLES_PER_ARM) -> list[dict]:
    """``k`` misleading-context rows of one arm's held-out evaluation (the first items in file order, the same
    items for every arm): question, context, response, verdict."""
    path = out / "stages" / ("eval_base" if arm == "base" else f"eval_{arm}") / "item_scores.jsonl"
    if not path.exists():
        return []
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [row for row in rows if row["condition"] == "misleading"][:k]
    return [{k_: row.get(k_) for k_ in ("item_id", "context", "question", "gold", "wrong_value", "response", "parsed",
                                         "correct")} for row in rows]


def write_report(summary: dict, out: Path) -> Path:
    from eval_hooks.io import write_text_atomic

    out = Path(out)
    plots = _plots(summary, out)
    r, names = summary["real"], _arms(summary)
    m = summary.get("mining", {})
    kn = m.get("knowledge", {})
    targets = summary.get("targets") or check_targets(summary)
    lines = [f"# selectrust real-model demo: SmolLM2-135M-Instruct on GeoNames facts (seed {summary['seed']})", "",
             f"Wall time: {summary['wall_seconds']:.0f} s. Stage times (s): "
             + ", ".join(f"{k} {v}" for k, v in summary.get("stage_seconds", {}).items()), "",
             "## Matched 4-condition evaluation on held-out facts", "",
             "Held-out items are countries (and their cities) never seen in mining or training. Accuracy per "
             "condition with a 95% bootstrap CI over items; SC2W is the share of clean-correct items that switch "
             "to a wrong answer under the misleading context. `unknown_correct_accuracy`: correct-context accuracy "
             "on the items the base answers wrong when clean (it can only answer them from the context).", "",
             _table(summary), "", f"![conditions]({plots[0]})", ""]
    if len(plots) > 1:
        lines += [f"![training]({plots[1]})", ""]
    lines += ["## Mining", "",
              f"Knowledge-aware mining on {m.get('items')} training items kept {m.get('kept')} quartets "
              f"(dropped: {m.get('dropped_by_reason')}); knowledge estimate {kn.get('counts')}; unknown pools "
              f"{kn.get('per_pool')}. All three arms train on this one pairs file: SCOPE and knowledge-aware on "
              "the four balanced pools (knowledge-aware adds the unknown_correct pool), misleading-only on the "
              "misleading pairs alone.", "",
              "## Targets", ""] + [f"- {k}: {'met' if v else '**missed**'}" for k, v in targets.items()]
    lines += ["", "## Sample responses (misleading context, the same first items for every arm)", ""]
    for n in names:
        rows = [[s["item_id"], s["wrong_value"], s["gold"], "`" + (s["response"] or "").replace("|", "/")
                 .replace("\n", " ")[:100] + "`", "right" if s["correct"] else "wrong"]
                for s in sample_responses(out, n)]
        if rows:
            lines += [f"**{LABEL[n]}**", "", md_table(["item", "context claims", "gold", "response", "verdict"], rows), ""]
    lines += ["## What this shows, and what it does not", "",
              "- It shows, on a real pretrained instruct model and real facts, the effect SCOPE is about: the base "
              "follows a confident wrong context on most facts it knows (SC2W), and a few dozen DPO steps on its own "
              "mined answers make it keep its answer, while the per-condition table shows what happened to clean, "
              "correct-context and irrelevant-context accuracy. Every verdict comes from the project's "
              "deterministic short-answer parser (eval_hooks/FORMATS.md), not from a judge model.",
              "- The misleading-only arm is the paper's Standard-DPO comparison: trained on misleading contexts "
              "alone, resisting them can turn into ignoring context; its correct-context column is where that shows.",
              "- Where a correct context is the only way to the answer (facts the base gets wrong when clean: the "
              "`unknown_correct_accuracy` row), SCOPE trained on facts the model knows also learns some of \"ignore "
              "context\". Knowledge-aware SCOPE adds pairs on facts the model does not know that prefer the answer "
              "the correct context gives; compare its `unknown_correct_accuracy` with its SC2W to see what that "
              "costs in resistance.",
              "- It does not show the paper's absolute numbers or anything about larger models: the model has "
              "135M parameters, the facts are two relations (capitals, city countries) in five context wordings "
              "made by one template each, held-out sets are small (CIs above are wide), and the run is one seed. "
              "The seed table in docs/real_model.md is the evidence across seeds.",
              "- Held-out facts are new countries, but the contexts on them use the same five channel templates "
              "as training: a model could learn the templates rather than selective trust in general."]
    path = out / "report.md"
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path
