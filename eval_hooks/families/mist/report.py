"""MIST's report section: accuracy per condition with CIs, SC2W, slices and the switch-to-wrong items
(``mist_accuracy.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from ...scoring.report_kit import ci_text, figure, md_table, pct, rate_bars, save
from selectrust.conditions import MIST_CONDITIONS

MAX_EXAMPLES = 10


def report_section(metrics: dict, item_scores: Sequence[dict], out_dir: Path, title: str) -> tuple[list[str], list[str]]:
    ci = metrics.get("ci", {})
    acc_ci = ci.get("accuracy", {})
    md = []
    unparsed = metrics.get("unparsed", {})
    no_answer, outside = metrics.get("no_answer", {}), metrics.get("outside_candidates", {})
    hedged, multiple = metrics.get("hedged", {}), metrics.get("multiple", {})
    compliance = metrics.get("format_compliance", {})

    def total(counts: dict):
        return sum(counts.values()) if counts else "–"

    rows = [[c, pct(metrics["accuracy"][c]), ci_text(acc_ci.get(c)), unparsed.get(c, "–"), no_answer.get(c, "–"),
             hedged.get(c, "–"), multiple.get(c, "–"), outside.get(c, "–"), pct(compliance.get(c))]
            for c in MIST_CONDITIONS]
    rows.append(["**Overall**", pct(metrics["overall"]), ci_text(ci.get("overall")), total(unparsed), total(no_answer),
                 total(hedged), total(multiple), total(outside), ""])
    rows.append(["**SC2W** (lower is better)", pct(metrics["sc2w"]), ci_text(ci.get("sc2w")), "", "", "", "", "", ""])
    boot = metrics.get("bootstrap")
    note = (f"95% CIs: paired item bootstrap, {boot['n_boot']} resamples, seed {boot['seed']}." if boot
            else "No bootstrap CIs (n_boot = 0).")
    md += [f"{metrics['n_items']} items × 4 conditions; {metrics.get('n_clean_correct', '–')} items correct "
           f"when clean (the SC2W denominator). {note} Unparsed rows are split into *no answer* (the response "
           "commits to none), *hedged* (it offers two candidates as alternatives, \"either Paris or Lyon\") and "
           "*multiple* (it names two or more answers together, \"Paris and Lyon\", a list of names); "
           "*outside candidates* are answers that are neither the gold nor the planted value (e.g. another city); "
           "format compliance is the share of rows that commit to an answer (eval_hooks/FORMATS.md).", "",
           md_table(["condition", "accuracy", "95% CI", "unparsed", "no answer", "hedged", "multiple",
                     "outside candidates", "format compliance"], rows)]

    fig, (ax, ax2) = figure(8, 3.8, 2, width_ratios=[5, 1.3])
    labels = [*MIST_CONDITIONS, "overall"]
    rate_bars(ax, labels, [*(metrics["accuracy"][c] for c in MIST_CONDITIONS), metrics["overall"]],
               cis=[*(acc_ci.get(c) for c in MIST_CONDITIONS), ci.get("overall")] if ci else None,
               color=["#4C72B0", "#C44E52", "#55A868", "#8172B2", "#333333"])
    ax.set_title("accuracy per condition (95% CI)")
    rate_bars(ax2, ["SC2W"], [metrics["sc2w"]], cis=[ci.get("sc2w")] if ci else None, color="#DD8452",
               ylabel="switch-to-wrong rate")
    ax2.set_title("lower is better", fontsize=9)
    fig.suptitle(title)
    plots = [save(fig, out_dir, "mist_accuracy.png")]

    for attr, per_value in metrics.get("slices", {}).items():
        if len(per_value) < 2:  # one value: the slice is the whole run
            continue
        srows = [[v, s["n_items"], *(pct(s["accuracy"][c]) for c in MIST_CONDITIONS), pct(s["overall"]),
                  pct(s["sc2w"])] for v, s in per_value.items()]
        md += ["", f"### Slices by `{attr}`", "",
               md_table([attr, "items", *MIST_CONDITIONS, "overall", "SC2W"], srows)]

    # the switch-to-wrong items themselves: what a reader wants to open next
    by_item: dict[Any, dict[str, dict]] = {}
    for r in item_scores:
        by_item.setdefault(r["item_id"], {})[r["condition"]] = r
    failures = [(i, rs) for i, rs in by_item.items()
                if rs.get("clean", {}).get("correct") and not rs.get("misleading", {}).get("correct", True)]
    if failures:
        ex = [[f"`{i}`", f"`{rs['clean'].get('gold')}`", f"`{rs['misleading'].get('wrong_value', '')}`",
               f"`{rs['misleading'].get('parsed')}`", rs["misleading"].get("channel") or ""]
              for i, rs in failures[:MAX_EXAMPLES]]
        md += ["", f"### Switch-to-wrong items ({len(failures)}; first {len(ex)})", "",
               md_table(["item", "gold", "planted wrong value", "parsed under misleading", "channel"], ex)]
    return md, plots
