"""MedCounterfact's report section, for both shapes of its ``metrics.json`` (:mod:`.metrics`):

- rows scored once (``<category>.<variant>`` cells): EA and Uncertain tables and heatmaps (``med_rates.png``);
- the Med run (``<pipeline>.<format>.<category>.<variant>`` cells, ``n_records``): the EA/Uncertain table,
  the EA-vs-Uncertain scatter (``ea_vs_uncertain.png``), label-probability bars (``label_probs.png``) and
  the mitigation deltas.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from ...scoring.report_kit import figure, heatmap, md_table, pct, save
from selectrust.conditions import MED_CATEGORIES as CATEGORIES, MED_VARIANTS as VARIANTS


def report_section(metrics: dict, item_scores: Sequence[dict], out_dir: Path, title: str) -> tuple[list[str], list[str]]:
    if "n_records" in metrics and "ea_rate" not in metrics:
        return label_probs_section(metrics)
    if "n_records" in metrics:
        return pipelines_section(metrics, out_dir)
    cats = [c for c in CATEGORIES if c in metrics["ea_rate"]]
    vars_ = [v for v in VARIANTS if any(v in metrics["ea_rate"][c] for c in cats)]
    md = [f"{metrics.get('n_items', '–')} items. EA = parsed label equals the original expert label (for "
          "counterfactual categories a high EA rate means the substituted term was treated as real). "
          "Unparsed answers count in the denominators."]
    grids = {}
    for key, name in (("ea_rate", "EA rate"), ("uncertain_rate", "Uncertain rate")):
        grid = [[metrics[key].get(c, {}).get(v) for v in vars_] for c in cats]
        grids[key] = grid
        md += ["", f"### {name}", "", md_table(["category", *vars_], [[c, *map(pct, r)] for c, r in zip(cats, grid)])]
    fig, (a1, a2) = figure(10, 3.8, 2)
    heatmap(fig, a1, grids["ea_rate"], cats, vars_, "EA rate", "Greens")
    heatmap(fig, a2, grids["uncertain_rate"], cats, vars_, "Uncertain rate", "Purples")
    fig.suptitle(title)
    return md, [save(fig, out_dir, "med_rates.png")]


def pipelines_section(metrics: dict, out_dir: Path) -> tuple[list[str], list[str]]:
    """The Med run's section (rates as fractions with 3 decimals, deltas signed)."""
    rows, points = [], []
    for pipe, fmts in metrics["ea_rate"].items():
        for fmt, cats in fmts.items():
            for cat, vars_ in cats.items():
                for var, ea in vars_.items():
                    u = metrics["uncertain_rate"][pipe][fmt][cat][var]
                    rows.append([pipe, fmt, cat, var, metrics["n"][pipe][fmt][cat][var], f"{ea:.3f}", f"{u:.3f}"])
                    if pipe == "base" and fmt == "mc":
                        points.append((u, ea, f"{cat}/{var}"))
    md = [f"Records: {metrics['n_records']}; answered through the refine chain: {metrics['n_refined']}.", "",
          md_table(["pipeline", "format", "category", "variant", "n", "EA rate", "Uncertain rate"], rows)]
    fig, ax = figure(6, 5)
    for u, ea, label in points:
        ax.scatter(u, ea, label=label, s=20)
    ax.set_xlabel("Uncertain rate"), ax.set_ylabel("EA rate"), ax.set_title("base, multiple choice")
    ax.legend(fontsize=5, ncol=2)
    plots = [save(fig, out_dir, "ea_vs_uncertain.png")]
    lp = metrics["label_prob_original"]
    if lp:
        keys = [(c, v) for c in lp for v in lp[c]]
        fig, ax = figure(max(6, len(keys) * 0.35), 4)
        ax.bar(range(len(keys)), [lp[c][v] for c, v in keys])
        ax.set_xticks(range(len(keys)), [f"{c}/{v}" for c, v in keys], rotation=90, fontsize=6)
        ax.set_ylabel("mean P(original label) before generation")
        plots.append(save(fig, out_dir, "label_probs.png"))
    deltas = [[pipe, cat, var, f"{d['uncertain_rate']:+.3f}", f"{d['ea_rate']:+.3f}", f"{d['aware']:+.3f}"]
              for pipe, cats in metrics["mitigation_delta"].items() for cat, vars_ in cats.items()
              for var, d in vars_.items()]
    if deltas:
        md += ["", md_table(["mitigation", "category", "variant", "Δ Uncertain", "Δ EA", "Δ aware"], deltas)]
    return md, plots


def label_probs_section(metrics: dict) -> tuple[list[str], list[str]]:
    """The section of a label-probability-only run (``eval.med.generate=false``): one row per cell."""
    lp = metrics["label_prob_original"]
    rows = [[c, v, metrics["label_prob_n"][c][v], f"{lp[c][v]:.3f}", f"{metrics['label_prob_uncertain'][c][v]:.3f}",
             f"{metrics['label_argmax_ea'][c][v]:.3f}", f"{metrics['label_argmax_uncertain'][c][v]:.3f}"]
            for c in lp for v in lp[c]]
    md = [f"Label probabilities only, no generation. Records: {metrics['n_records']}; scored on the first evidence "
          f"chunk (prompt over the budget): {metrics['n_refined']}.", "",
          md_table(["category", "variant", "n", "P(original)", "P(Uncertain)", "argmax EA", "argmax Uncertain"], rows)]
    return md, []
