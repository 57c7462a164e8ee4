"""Report of the toy demo (``recipes/demo.py demo=toy``): before/after tables, plots, honest notes.

Every number shown comes from the stages' ``metrics.json`` (written by ``eval_hooks``) and the SCOPE
run's ``metrics.jsonl``; nothing is recomputed here except differences for display.
"""

from __future__ import annotations

from pathlib import Path

from selectrust.conditions import CLEAN, CORRECT, IRRELEVANT, MISLEADING, MIST_CONDITIONS as CONDS

from ..common import draw_scope_training, wall_line
from selectrust.core.io import write_text_atomic
from eval_hooks.report import compare_table

TARGETS = {"base_sc2w_min": 0.80, "scope_sc2w_max": 0.15, "scope_clean_correct_min": 0.90,
           "knowledge_aware_unseen_correct_min": 0.90}
ARMS = ("base", "trained", "misleading_only", "knowledge_aware")
LABEL = {"base": "base (SFT)", "trained": "SCOPE", "misleading_only": "misleading-only",
         "knowledge_aware": "knowledge-aware"}


def _pct(v) -> str:
    return "–" if v is None else f"{100 * v:.1f}%"


def check_targets(summary: dict) -> dict[str, bool]:
    """The issue's targets that one run can check (the 3-seed ablation target is checked by tests)."""
    s = summary["scope"]
    out = {
        "base SC2W >= 80%": (s["base"].get("sc2w") or 0) >= TARGETS["base_sc2w_min"],
        "SCOPE SC2W <= 15%": s["trained"].get("sc2w") is not None and s["trained"]["sc2w"] <= TARGETS["scope_sc2w_max"],
        "SCOPE clean >= 90%": s["trained"]["accuracy"][CLEAN] >= TARGETS["scope_clean_correct_min"],
        "SCOPE correct-context >= 90%": s["trained"]["accuracy"][CORRECT] >= TARGETS["scope_clean_correct_min"],
    }
    if not summary.get("reused_stages"):  # a continued run's wall time is not the pipeline's
        out["pipeline <= 10 min"] = summary.get("wall_seconds", 0) <= 600
    b = summary.get("box2") or {}
    if "base" in b and "sft" in b:
        db, ds = b["base"]["delta"]["bad"], b["sft"]["delta"]["bad"]
        out["Box2: |Δbad| after SFT < base"] = db is not None and ds is not None and abs(ds) < abs(db)
    return out


def check_knowledge_aware_targets(summary: dict) -> dict[str, bool]:
    """Knowledge-aware SCOPE's targets (docs/scope.md#knowledge-aware-scope); empty without that arm."""
    s = summary["scope"]
    if "knowledge_aware" not in s:
        return {}
    ka, kau = s["knowledge_aware"], summary["scope_unseen"]["knowledge_aware"]
    return {
        "knowledge-aware SC2W <= 15%": ka.get("sc2w") is not None and ka["sc2w"] <= TARGETS["scope_sc2w_max"],
        "knowledge-aware clean and correct >= 90%": min(ka["accuracy"][CLEAN], ka["accuracy"][CORRECT]) >=
        TARGETS["scope_clean_correct_min"],
        "knowledge-aware unseen correct >= 90%": kau["accuracy"][CORRECT] >= TARGETS["knowledge_aware_unseen_correct_min"],
    }


def print_table(summary: dict) -> None:
    s = summary["scope"]
    names, label = [n for n in ARMS if n in s], LABEL
    print("\n[demo] matched evaluation on held-out keys")
    print("  " + f"{'metric':<22}" + "".join(f"{label[n]:>17}" for n in names))
    for c in CONDS:
        print("  " + f"{'acc ' + c:<22}" + "".join(f"{_pct(s[n]['accuracy'][c]):>17}" for n in names))
    for k in ("overall", "sc2w"):
        print("  " + f"{k:<22}" + "".join(f"{_pct(s[n].get(k)):>17}" for n in names))
    u = summary.get("scope_unseen", {})
    if u:
        print("  " + f"{'unseen keys: correct':<22}" + "".join(
            f"{_pct(u[n]['accuracy'][CORRECT]):>17}" for n in names if n in u))
    b = summary.get("box2") or {}
    if b:
        print("\n[demo] Box2 effects (toy workflows)")
        stages = [n for n in ("base", "sft", "grpo") if n in b]
        print("  " + f"{'':<22}" + "".join(f"{n:>17}" for n in stages))
        for k in ("use", "bad", "stop", "switch"):
            vals = [b[n]["delta"][k] for n in stages]
            print("  " + f"{'Δ' + k:<22}" + "".join(f"{'–' if v is None else f'{100 * v:+.1f} pp':>17}" for v in vals))
    targets = {**check_targets(summary), **check_knowledge_aware_targets(summary)}
    print("\n[demo] targets: " + ", ".join(f"{k}: {'ok' if v else 'MISSED'}" for k, v in targets.items()))


def _plots(summary: dict, out: Path) -> list[str]:
    import matplotlib  # deferred: imports matplotlib

    matplotlib.use("Agg", force=True)
    from matplotlib.figure import Figure  # deferred: imports matplotlib

    files = []
    s = summary["scope"]
    names, label = [n for n in ARMS if n in s], LABEL
    fig = Figure(figsize=(9, 3.6))
    ax, ax2 = fig.subplots(1, 2, gridspec_kw={"width_ratios": [3, 1]})
    width = 0.8 / len(names)
    for j, n in enumerate(names):
        vals = [s[n]["accuracy"][c] for c in CONDS]
        xs = [i + (j - (len(names) - 1) / 2) * width for i in range(len(CONDS))]
        ax.bar(xs, vals, width, label=label[n])
    ax.set_xticks(range(len(CONDS)), CONDS)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("accuracy (held-out keys)")
    ax.legend(fontsize=8, loc="lower left")
    ax2.bar([label[n] for n in names], [s[n].get("sc2w") or 0 for n in names], color="#C44E52")
    ax2.set_ylim(0, 1.05)
    ax2.set_title("SC2W (lower is better)", fontsize=9)
    ax2.tick_params(axis="x", labelrotation=30, labelsize=7)
    fig.tight_layout()
    fig.savefig(out / "demo_conditions.png", dpi=110)
    files.append("demo_conditions.png")

    metrics_path = out / "stages" / "scope" / "metrics.jsonl"
    if metrics_path.exists():
        fig = Figure(figsize=(9, 3.2))
        draw_scope_training(*fig.subplots(1, 2), metrics_path)
        fig.tight_layout()
        fig.savefig(out / "demo_training.png", dpi=110)
        files.append("demo_training.png")

    b = summary.get("box2") or {}
    if b:
        stages = [n for n in ("base", "sft", "grpo") if n in b]
        fig = Figure(figsize=(6.5, 3.2))
        ax = fig.subplots()
        keys = ("use", "bad", "stop", "switch")
        width = 0.8 / len(stages)
        for j, n in enumerate(stages):
            xs = [i + (j - (len(stages) - 1) / 2) * width for i in range(len(keys))]
            ax.bar(xs, [b[n]["delta"][k] or 0 for k in keys], width, label=n)
        ax.axhline(0, color="black", lw=0.6)
        ax.set_xticks(range(len(keys)), [f"Δ{k}" for k in keys])
        ax.set_ylabel("effect (fraction)")
        ax.legend(fontsize=8)
        ax.set_title("Box2 effects on the toy workflows", fontsize=9)
        fig.tight_layout()
        fig.savefig(out / "demo_box2.png", dpi=110)
        files.append("demo_box2.png")
    return files


def write_demo_report(summary: dict, out: Path) -> Path:
    out = Path(out)
    plots = _plots(summary, out)
    s, u, b = summary["scope"], summary.get("scope_unseen", {}), summary.get("box2") or {}
    label = LABEL
    lines = [f"# selectrust demo (seed {summary['seed']})", "",
             wall_line(summary), "",
             "## SCOPE on held-out keys (matched 4-condition evaluation)", "",
             compare_table({label[n]: s[n] for n in ("base", "trained") if n in s}, "mist"), ""]
    if "misleading_only" in s:
        lines += ["### SCOPE vs the misleading-only ablation", "",
                  compare_table({"misleading-only": s["misleading_only"], "SCOPE": s["trained"]}, "mist"), ""]
    if "knowledge_aware" in s:
        lines += ["### Knowledge-aware SCOPE (unknown_correct pool from never-learned training keys)", "",
                  compare_table({"SCOPE": s["trained"], "knowledge-aware": s["knowledge_aware"]}, "mist"), ""]
    lines += [f"![conditions]({plots[0]})", ""]
    if "demo_training.png" in plots:
        lines += ["![training curves](demo_training.png)", ""]
    m = summary.get("mining", {})
    if m:
        lines += [f"Pair mining kept {m.get('kept')} of {m.get('items')} training items "
                  f"({m.get('kept_by_source')}); dropped: {m.get('dropped_by_reason')}.", ""]
    if b:
        lines += ["## Box2 on toy workflows (five conditions)", "",
                  compare_table({n: b[n] for n in ("base", "sft", "grpo") if n in b}, "box2"), "",
                  "![box2](demo_box2.png)", ""]
    targets = {**check_targets(summary), **check_knowledge_aware_targets(summary)}
    lines += ["## Targets", ""] + [f"- {k}: {'met' if v else '**missed**'}" for k, v in targets.items()]
    lines += ["", "## What this shows, and what it does not", "",
              "- It shows the SCOPE mechanism end to end on a model that starts as a pure hint follower: pairs "
              "mined from the model's own signal-following answers, balanced over four matched contexts, "
              "remove the switch-to-wrong behaviour (SC2W) on held-out keys while clean and correct-context "
              "accuracy stay high; the misleading-only ablation is the paper's Standard-DPO comparison.",
              "- It does not show anything about real language models, real misleading contexts, or the "
              "paper's absolute numbers: the task is a key->digit rule (a key's first letter decides its "
              "digit) with one hint format, the model has under half a million parameters, and all hints "
              "look alike by construction, so the only way to tell a right hint from a wrong one is the "
              "model's own knowledge. Held-out keys are new questions about knowledge the DPO stage trained "
              "on (their first letters also start train keys), not new facts.",
              "- On held-out keys the model knows every answer, so ignoring hints altogether costs nothing "
              "there: the misleading-only ablation can match or beat SCOPE on that table. Its cost shows "
              "where only the context can answer, the unseen keys below: resistance alone is not selective "
              "trust.",
              "- Box2 here uses workflows that state the answer (the toy has no inner trajectory), so Δuse "
              "and Δbad measure copying a stated digit, not following a plan."]
    if u:
        names = [n for n in ARMS if n in u]
        lines += ["", "### Known limit: context use on keys the model never learned", "",
                  "On keys never seen in SFT only a hint can give the answer. Correct-context accuracy there "
                  "measures whether the model still *uses* reliable context when it has no knowledge to check "
                  "it against:", "",
                  "| model | clean (chance ≈ 10%) | correct hint | misleading hint | irrelevant |",
                  "|---|---|---|---|---|"]
        for n in names:
            a = u[n]["accuracy"]
            lines.append(f"| {label[n]} | " + " | ".join(_pct(a[c]) for c in (CLEAN, CORRECT, MISLEADING, IRRELEVANT))
                         + " |")
        lines += ["", "A drop in the correct-hint column after SCOPE means the tiny model learned part "
                      "\"ignore hints\" besides \"check hints against what I know\" on keys it cannot check. "
                      "We report it rather than tune it away. Knowledge-aware SCOPE adds pairs on never-learned "
                      "*training* keys (disjoint from these) that prefer the hinted answer over the model's own "
                      "wrong one (docs/scope.md#knowledge-aware-scope)."]
    path = out / "report.md"
    write_text_atomic(path, "\n".join(lines) + "\n")
    return path
