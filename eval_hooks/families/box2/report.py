"""Box2's report section: condition scores, the four effects and recovery curves over k
(``box2_scores.png``, ``box2_recovery.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ...scoring.report_kit import figure, md_table, pct, pp, rate_bars, save
from selectrust.conditions import BOX2_FIXED_REGIMES as FIXED_REGIMES

BOX2_LABELS = {"none": "S_0 none", "good": "S_G good", "bad": "S_B bad", "partial": "S_P partial",
               "mixed": "S_M mixed"}
DELTA_LABELS = {"use": "Δuse = S_G − S_0", "bad": "Δbad = S_B − S_0", "stop": "Δstop = S_P − S_G",
                "switch": "Δswitch = S_M − S_P"}


def report_section(metrics: dict, item_scores: Sequence[dict], out_dir: Path, title: str) -> tuple[list[str], list[str]]:
    score, n = metrics["score"], metrics.get("n", {})
    unparsed = metrics.get("unparsed", {})
    md = [f"{metrics.get('n_items', '–')} tasks. Partial and mixed average the per-k scores with equal "
          "weight per change point k; effects use unrounded scores.", "",
          md_table(["condition", "score", "rows", "unparsed"],
                   [[BOX2_LABELS[r], pct(score[r]), n.get(r, "–"), unparsed.get(r, "–")] for r in BOX2_LABELS]),
          "", md_table(["effect", "value"], [[DELTA_LABELS[k], pp(v)] for k, v in metrics["delta"].items()])]
    rec = metrics.get("recovery", {})
    ks = sorted({int(k) for curve in rec.values() for k in curve})
    if ks:
        md += ["", "### Recovery over change point k", "",
               md_table(["k", "partial (S_P,k)", "mixed (S_M,k)"],
                        [[k, pct(rec.get("partial", {}).get(str(k))), pct(rec.get("mixed", {}).get(str(k)))] for k in ks])]

    fig, ax = figure(6.5, 3.6)
    rate_bars(ax, [BOX2_LABELS[r] for r in BOX2_LABELS], [score[r] for r in BOX2_LABELS],
               color=["#999999", "#55A868", "#C44E52", "#4C72B0", "#DD8452"], ylabel="success rate")
    d = metrics["delta"]
    ax.set_title(f"{title}\nΔuse {pp(d['use'])}, Δbad {pp(d['bad'])}, Δstop {pp(d['stop'])}, "
                 f"Δswitch {pp(d['switch'])}", fontsize=10)
    plots = [save(fig, out_dir, "box2_scores.png")]
    if ks:
        fig, ax = figure(6.5, 3.6)
        for regime, color, marker in (("partial", "#4C72B0", "o"), ("mixed", "#DD8452", "s")):
            pts = sorted((int(k), v) for k, v in rec.get(regime, {}).items())
            if pts:
                ax.plot([k for k, _ in pts], [v for _, v in pts], marker=marker, color=color, label=regime)
        for regime, color in zip(FIXED_REGIMES, ("#999999", "#55A868", "#C44E52")):
            if score.get(regime) is not None:
                ax.axhline(score[regime], color=color, ls="--", lw=1, label=f"{regime} ({pct(score[regime])})")
        ax.set_xticks(ks)
        ax.set_xlabel("change point k (good steps kept)")
        ax.set_ylabel("success rate")
        ax.set_ylim(-0.03, 1.05)
        ax.yaxis.set_major_formatter(lambda y, _: f"{100 * y:.0f}%")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8, loc="best")
        ax.set_title("recovery curves")
        plots.append(save(fig, out_dir, "box2_recovery.png"))
    return md, plots
