"""Human-readable evaluation reports: ``report.md`` (tables) plus PNG plots, one set per family.

``write_report`` reads only a ``metrics.json`` dict (from :func:`eval_hooks.metrics.compute_metrics`)
and the item scores it came from; ``compare_table`` renders several runs side by side (before/after
training) for the demo and the trainers. Plots use matplotlib's object API (``Figure`` + Agg canvas),
so nothing touches pyplot's global state or needs a display.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from .metrics import headline
from .metrics.box2 import FIXED_REGIMES
from .metrics.med import CATEGORIES, VARIANTS
from .metrics.mist import MIST_CONDITIONS

BOX2_LABELS = {"none": "S_0 none", "good": "S_G good", "bad": "S_B bad", "partial": "S_P partial",
               "mixed": "S_M mixed"}
DELTA_LABELS = {"use": "Δuse = S_G − S_0", "bad": "Δbad = S_B − S_0", "stop": "Δstop = S_P − S_G",
                "switch": "Δswitch = S_M − S_P"}
MAX_EXAMPLES = 10


# -- formatting --------------------------------------------------------------------------------
def pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def pp(x: float | None, digits: int = 1) -> str:
    """A difference of two rates, in percentage points with a sign."""
    return "–" if x is None else f"{100 * x:+.{digits}f} pp"


def ci_text(ci: Sequence[float] | None) -> str:
    return "–" if not ci else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines)


# -- plotting ----------------------------------------------------------------------------------
def _figure(width: float, height: float, ncols: int = 1, **kw):
    from matplotlib.figure import Figure  # lazy: the CLI imports this module for data-only work

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    axes = fig.subplots(1, ncols, **kw)
    return fig, axes


def _bar_labels(ax, bars, values, fmt=lambda v: pct(v), tops=None) -> None:
    """Value labels above each bar, or above ``tops`` (the CI upper ends) so error bars stay clear."""
    for i, (bar, v) in enumerate(zip(bars, values)):
        if v is not None:
            y = bar.get_height() if tops is None else max(bar.get_height(), tops[i])
            ax.annotate(fmt(v), (bar.get_x() + bar.get_width() / 2, y), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=8)


def _save(fig, out_dir: Path, name: str) -> str:
    fig.savefig(out_dir / name)
    return name


def _rate_bars(ax, labels, values, cis=None, color="#4C72B0", ylabel="accuracy") -> None:
    vals = [0.0 if v is None else v for v in values]
    yerr, tops = None, None
    if cis is not None:
        tops = [c[1] if c else v for v, c in zip(vals, cis)]
        yerr = [[max(0.0, v - c[0]) if c else 0.0 for v, c in zip(vals, cis)],
                [max(0.0, c[1] - v) if c else 0.0 for v, c in zip(vals, cis)]]
    bars = ax.bar(labels, vals, color=color, yerr=yerr, capsize=4, ecolor="#333333")
    ax.set_ylim(0, 1.12)
    ax.set_ylabel(ylabel)
    ax.yaxis.set_major_formatter(lambda y, _: f"{100 * y:.0f}%")
    ax.grid(axis="y", alpha=0.3)
    _bar_labels(ax, bars, values, tops=tops)


def _heatmap(fig, ax, matrix, row_labels, col_labels, title, cmap) -> None:
    import numpy as np

    data = np.array([[np.nan if v is None else v for v in r] for r in matrix], dtype=float)
    im = ax.imshow(data, vmin=0, vmax=1, cmap=cmap, aspect="auto")
    ax.set_xticks(range(len(col_labels)), col_labels, rotation=20)
    ax.set_yticks(range(len(row_labels)), row_labels)
    ax.set_title(title)
    for i, r in enumerate(matrix):
        for j, v in enumerate(r):
            if v is not None:
                ax.text(j, i, pct(v, 0), ha="center", va="center", fontsize=8,
                        color="white" if v > 0.6 else "black")
    fig.colorbar(im, ax=ax, format=lambda y, _: f"{100 * y:.0f}%", shrink=0.8)


# -- MIST --------------------------------------------------------------------------------------
def _mist(metrics: dict, item_scores: Sequence[dict], out_dir: Path, title: str) -> tuple[list[str], list[str]]:
    ci = metrics.get("ci", {})
    acc_ci = ci.get("accuracy", {})
    md = []
    unparsed = metrics.get("unparsed", {})
    rows = [[c, pct(metrics["accuracy"][c]), ci_text(acc_ci.get(c)), unparsed.get(c, "–")] for c in MIST_CONDITIONS]
    rows.append(["**Overall**", pct(metrics["overall"]), ci_text(ci.get("overall")), sum(unparsed.values()) if unparsed else "–"])
    rows.append(["**SC2W** (lower is better)", pct(metrics["sc2w"]), ci_text(ci.get("sc2w")), ""])
    boot = metrics.get("bootstrap")
    note = (f"95% CIs: paired item bootstrap, {boot['n_boot']} resamples, seed {boot['seed']}." if boot
            else "No bootstrap CIs (n_boot = 0).")
    md += [f"{metrics['n_items']} items × 4 conditions; {metrics.get('n_clean_correct', '–')} items correct "
           f"when clean (the SC2W denominator). {note}", "",
           md_table(["condition", "accuracy", "95% CI", "unparsed"], rows)]

    fig, (ax, ax2) = _figure(8, 3.8, 2, width_ratios=[5, 1.3])
    labels = [*MIST_CONDITIONS, "overall"]
    _rate_bars(ax, labels, [*(metrics["accuracy"][c] for c in MIST_CONDITIONS), metrics["overall"]],
               cis=[*(acc_ci.get(c) for c in MIST_CONDITIONS), ci.get("overall")] if ci else None,
               color=["#4C72B0", "#C44E52", "#55A868", "#8172B2", "#333333"])
    ax.set_title("accuracy per condition (95% CI)")
    _rate_bars(ax2, ["SC2W"], [metrics["sc2w"]], cis=[ci.get("sc2w")] if ci else None, color="#DD8452",
               ylabel="switch-to-wrong rate")
    ax2.set_title("lower is better", fontsize=9)
    fig.suptitle(title)
    plots = [_save(fig, out_dir, "mist_accuracy.png")]

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


# -- Box2 --------------------------------------------------------------------------------------
def _box2(metrics: dict, item_scores: Sequence[dict], out_dir: Path, title: str) -> tuple[list[str], list[str]]:
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

    fig, ax = _figure(6.5, 3.6)
    _rate_bars(ax, [BOX2_LABELS[r] for r in BOX2_LABELS], [score[r] for r in BOX2_LABELS],
               color=["#999999", "#55A868", "#C44E52", "#4C72B0", "#DD8452"], ylabel="success rate")
    d = metrics["delta"]
    ax.set_title(f"{title}\nΔuse {pp(d['use'])}, Δbad {pp(d['bad'])}, Δstop {pp(d['stop'])}, "
                 f"Δswitch {pp(d['switch'])}", fontsize=10)
    plots = [_save(fig, out_dir, "box2_scores.png")]
    if ks:
        fig, ax = _figure(6.5, 3.6)
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
        plots.append(_save(fig, out_dir, "box2_recovery.png"))
    return md, plots


# -- Taste -------------------------------------------------------------------------------------
def _taste_row(name: str, s: dict) -> list:
    o = s["paired_outcomes"]
    return [name, s["n"], pct(s["seeded"]), pct(s["reversed"]), pct(s["strict"]), pct(s["mean"]),
            o["CC"], o["CW"], o["WC"], o["WW"]]


def _taste(metrics: dict, item_scores: Sequence[dict], out_dir: Path, title: str) -> tuple[list[str], list[str]]:
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
                                                       [_taste_row(k, s) for k, s in metrics[key].items()])]

    import numpy as np

    fig, ax = _figure(4.2, 3.6)
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
    plots = [_save(fig, out_dir, "taste_paired_outcomes.png")]

    cells = metrics.get("per_cell", {})
    if cells:
        fig, ax = _figure(7, 3.6)
        names = list(cells)
        x = np.arange(len(names))
        w = 0.38
        b1 = ax.bar(x - w / 2, [cells[c]["strict"] for c in names], w, label="strict", color="#4C72B0")
        b2 = ax.bar(x + w / 2, [cells[c]["mean"] for c in names], w, label="mean", color="#A1C9F4")
        _bar_labels(ax, b1, [cells[c]["strict"] for c in names], fmt=lambda v: pct(v, 0))
        _bar_labels(ax, b2, [cells[c]["mean"] for c in names], fmt=lambda v: pct(v, 0))
        ax.set_xticks(x, [f"{c}\n(n={cells[c]['n']})" for c in names], fontsize=8)
        ax.axhline(0.25, color="#999999", ls=":", lw=1, label="random (strict)")
        ax.set_ylim(0, 1.12)
        ax.yaxis.set_major_formatter(lambda y, _: f"{100 * y:.0f}%")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left", ncols=3)
        ax.set_title(f"per cell (Average {pct(metrics['average'])})")
        plots.append(_save(fig, out_dir, "taste_cells.png"))
    return md, plots


# -- Med ---------------------------------------------------------------------------------------
def _med(metrics: dict, item_scores: Sequence[dict], out_dir: Path, title: str) -> tuple[list[str], list[str]]:
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
    fig, (a1, a2) = _figure(10, 3.8, 2)
    _heatmap(fig, a1, grids["ea_rate"], cats, vars_, "EA rate", "Greens")
    _heatmap(fig, a2, grids["uncertain_rate"], cats, vars_, "Uncertain rate", "Purples")
    fig.suptitle(title)
    return md, [_save(fig, out_dir, "med_rates.png")]


_FAMILIES = {"mist": _mist, "box2": _box2, "taste": _taste, "med": _med}


def write_report(family: str, metrics: dict, item_scores: Sequence[dict], out_dir: str | Path, *,
                 title: str | None = None) -> Path:
    """Write ``out_dir/report.md`` and the family's PNG plots; return the path of ``report.md``.

    Plots: MIST ``mist_accuracy.png`` (per-condition bars with CIs, SC2W); Box2 ``box2_scores.png``
    and ``box2_recovery.png``; Taste ``taste_paired_outcomes.png`` and ``taste_cells.png``; Med
    ``med_rates.png`` (EA and Uncertain heatmaps).
    """
    if family not in _FAMILIES:
        raise ValueError(f"unknown family {family!r}; accepted: {', '.join(_FAMILIES)}")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    title = title or f"{family} evaluation"
    body, plots = _FAMILIES[family](metrics, item_scores, out_dir, title)
    text = [f"# {title}", "", f"Family: `{family}`. Rates are percentages of rows or items.", "",
            *(f"![{p}]({p})" for p in plots), "", "## Results", "", *body, ""]
    path = out_dir / "report.md"
    path.write_text("\n".join(text), encoding="utf-8")
    return path


def compare_table(named_metrics: dict[str, dict], family: str) -> str:
    """Markdown table of the headline metrics of several runs, one column per run (in dict order).
    With exactly two runs a last column gives the change from the first to the second (percentage
    points for rates, plain differences for counts)."""
    if not named_metrics:
        raise ValueError("compare_table needs at least one run")
    flats = {name: headline(family, m) for name, m in named_metrics.items()}
    keys: list[str] = []
    for flat in flats.values():
        keys += [k for k in flat if k not in keys]
    names = list(flats)

    def is_count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)

    rows = []
    for k in keys:
        vals = [flats[n].get(k) for n in names]
        fmt = pp if k.startswith("delta.") else pct
        cells = [("–" if v is None else str(v)) if is_count(v) else fmt(v) for v in vals]
        if len(names) == 2:
            a, b = vals
            if a is None or b is None:
                cells.append("–")
            elif is_count(a) and is_count(b):
                cells.append(f"{b - a:+d}")
            else:
                cells.append(pp(b - a))
        rows.append([f"`{k}`", *cells])
    header = ["metric", *names] + (["Δ"] if len(names) == 2 else [])
    return md_table(header, rows)
