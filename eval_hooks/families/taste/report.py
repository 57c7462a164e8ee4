"""Taste's report section: paired-order accuracy, paired outcomes, position choices and per-slice tables
(``taste_paired_outcomes.png``, ``taste_cells.png``)."""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ...scoring.report_kit import bar_labels, figure, md_table, pct, save


def _row(name: str, s: dict) -> list:
    o = s["paired_outcomes"]
    return [name, s["n"], pct(s["seeded"]), pct(s["reversed"]), pct(s["strict"]), pct(s["mean"]),
            o["CC"], o["CW"], o["WC"], o["WW"]]


def report_section(metrics: dict, item_scores: Sequence[dict], out_dir: Path, title: str) -> tuple[list[str], list[str]]:
    o, pc = metrics["paired_outcomes"], metrics["position_choices"]
    md = [f"{metrics['n_items']} items, each asked in the seeded order and its reverse. Strict = both "
          "orders correct; Average = ½ (engineering strict + research strict).", "",
          md_table(["seeded", "reversed", "strict", "mean", "**Average**"],
                   [[pct(metrics["seeded"]), pct(metrics["reversed"]), pct(metrics["strict"]), pct(metrics["mean"]),
                     f"**{pct(metrics['average'])}**"]]),
          "", "### Paired outcomes (seeded × reversed)", "",
          md_table(["", "reversed correct", "reversed wrong"],
                   [["seeded correct", f"CC {o['CC']}", f"CW {o['CW']}"], ["seeded wrong", f"WC {o['WC']}", f"WW {o['WW']}"]]),
          "", "### Position choices", "",
          md_table(["", "A", "B", "unparsed"],
                   [["seeded", pc["seeded_A"], pc["seeded_B"], metrics.get("unparsed", {}).get("seeded", "–")],
                    ["reversed", pc["reversed_A"], pc["reversed_B"], metrics.get("unparsed", {}).get("reversed", "–")]])]
    header = ["", "n", "seeded", "reversed", "strict", "mean", "CC", "CW", "WC", "WW"]
    for key, name in (("per_cell", "cell"), ("per_domain", "domain"), ("per_horizon", "horizon")):
        if metrics.get(key):
            md += ["", f"### Per {name}", "", md_table([name, *header[1:]],
                                                       [_row(k, s) for k, s in metrics[key].items()])]

    import numpy as np

    fig, ax = figure(4.2, 3.6)
    mat = np.array([[o["CC"], o["CW"]], [o["WC"], o["WW"]]])
    ax.imshow(mat, cmap="Blues", vmin=0, vmax=max(1, int(mat.max())))
    for i in range(2):
        for j in range(2):
            name = ("CC", "CW", "WC", "WW")[2 * i + j]
            ax.text(j, i, f"{name}\n{mat[i, j]}\n{pct(mat[i, j] / max(1, mat.sum()), 0)}", ha="center",
                    va="center", color="white" if mat[i, j] > mat.max() * 0.6 else "black", fontsize=10)
    ax.set_xticks([0, 1], ["reversed\ncorrect", "reversed\nwrong"])
    ax.set_yticks([0, 1], ["seeded\ncorrect", "seeded\nwrong"])
    ax.set_title(f"{title}\nstrict {pct(metrics['strict'])}, mean {pct(metrics['mean'])}", fontsize=10)
    plots = [save(fig, out_dir, "taste_paired_outcomes.png")]

    cells = metrics.get("per_cell", {})
    if cells:
        fig, ax = figure(7, 3.6)
        names = list(cells)
        x = np.arange(len(names))
        w = 0.38
        b1 = ax.bar(x - w / 2, [cells[c]["strict"] for c in names], w, label="strict", color="#4C72B0")
        b2 = ax.bar(x + w / 2, [cells[c]["mean"] for c in names], w, label="mean", color="#A1C9F4")
        bar_labels(ax, b1, [cells[c]["strict"] for c in names], fmt=lambda v: pct(v, 0))
        bar_labels(ax, b2, [cells[c]["mean"] for c in names], fmt=lambda v: pct(v, 0))
        ax.set_xticks(x, [f"{c}\n(n={cells[c]['n']})" for c in names], fontsize=8)
        ax.axhline(0.25, color="#999999", ls=":", lw=1, label="random (strict)")
        ax.set_ylim(0, 1.12)
        ax.yaxis.set_major_formatter(lambda y, _: f"{100 * y:.0f}%")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", ncols=3)
        ax.set_title(f"per cell (Average {pct(metrics['average'])})")
        plots.append(save(fig, out_dir, "taste_cells.png"))
    return md, plots
