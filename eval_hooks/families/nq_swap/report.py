"""NQ-Swap's report section: MIST's section (accuracies, SC2W, slices, ``mist_accuracy.png``), then the NQ-Swap
table (all items, known, unknown) with CIs and ``nq_swap.png``."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ...scoring.report_kit import ci_text, figure, md_table, pct, rate_bars, save
from ..mist.report import report_section as mist_section

_SHOWN = (("p_org", "original"), ("p_sub", "substitute"), ("p_both", "both"), ("memorization_ratio", "MR"),
          ("em_org_context", "EM (orig. passage)"))


def _cell(per: dict, key: str) -> str:
    ci = (per.get("ci") or {}).get(key)
    return pct(per.get(key)) + (f" {ci_text(ci)}" if ci else "")


def report_section(metrics: dict, item_scores: Sequence[dict], out_dir: Path,
                   title: str) -> tuple[list[str], list[str]]:
    md, plots = mist_section(metrics, item_scores, out_dir, title)
    nq = metrics.get("nq_swap")
    if not nq:
        return md, plots
    groups = [("all", nq), *((label, per) for label, per in nq.get("by_knowledge", {}).items())]
    rows = [[name, per["n_items"], *(_cell(per, k) for k, _ in _SHOWN), _cell(per, "em_org_context_strict")]
            for name, per in groups]
    md += ["", "### NQ-Swap", "",
           "Under the substituted passage (the misleading row): the share of items whose response names the original "
           "answer alone (*original*, p_org), the substitute alone (*substitute*, p_sub) or both; *MR* is the "
           "memorization ratio p_org / (p_org + p_sub). *EM (orig. passage)*: the share of responses to the original "
           "passage (the correct row) that name the original answer; *strict*: whose first sentence is that answer. "
           f"Known / unknown: {nq.get('knowledge_source', '')}. 95% CIs in brackets (docs/nq_swap.md#metrics).", "",
           md_table(["items", "n", *(label for _, label in _SHOWN), "EM strict"], rows)]
    fig, axes = figure(3.6 * len(groups), 3.6, len(groups))
    axes = list(axes) if len(groups) > 1 else [axes]
    for ax, (name, per) in zip(axes, groups):
        ci = per.get("ci") or {}
        rate_bars(ax, [label for _, label in _SHOWN], [per.get(k) for k, _ in _SHOWN],
                  cis=[ci.get(k) for k, _ in _SHOWN] if ci else None,
                  color=["#55A868", "#C44E52", "#8172B2", "#DD8452", "#4C72B0"], ylabel="share of items")
        ax.set_title(f"{name} ({per['n_items']} items)", fontsize=9)
        ax.tick_params(axis="x", labelrotation=30, labelsize=7)
    fig.suptitle(f"{title}: NQ-Swap")
    plots.append(save(fig, out_dir, "nq_swap.png"))
    return md, plots
