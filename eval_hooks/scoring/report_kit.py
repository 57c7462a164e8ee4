"""The pieces every family's report section is made of: number formatting, Markdown tables and
matplotlib plots (object API: ``Figure`` + Agg canvas, so nothing touches pyplot's global state or needs
a display). The sections themselves live with their families (``eval_hooks/families/<name>/report.py``);
the report shell is :meth:`eval_hooks.families.base.Family.write_report`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence


# -- formatting --------------------------------------------------------------------------------
def pct(x: float | None, digits: int = 1) -> str:
    return "–" if x is None else f"{100 * x:.{digits}f}%"


def pp(x: float | None, digits: int = 1) -> str:
    """A difference of two rates, in percentage points with a sign."""
    return "–" if x is None else f"{100 * x:+.{digits}f} pp"


def times(x: float | None) -> str:
    """A ratio of two rates (a paired SC2W share of the base's), as ``0.45×``."""
    return "–" if x is None else f"{x:.2f}×"


def ci_text(ci: Sequence[float] | None) -> str:
    return "–" if not ci else f"[{100 * ci[0]:.1f}, {100 * ci[1]:.1f}]"


def with_ci(x: dict, fmt=pct) -> str:
    """``{"value", "ci"}`` as ``value [low, high]`` in ``fmt`` (the value alone without an interval)."""
    ci = x.get("ci")
    return f"{fmt(x['value'])} [{fmt(ci[0])}, {fmt(ci[1])}]" if ci else fmt(x["value"])


def md_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(map(str, r)) + " |" for r in rows]
    return "\n".join(lines)


# -- plotting ----------------------------------------------------------------------------------
def figure(width: float, height: float, ncols: int = 1, **kw):
    from matplotlib.figure import Figure  # lazy: the CLI imports this module for data-only work

    fig = Figure(figsize=(width, height), dpi=110, layout="constrained")
    axes = fig.subplots(1, ncols, **kw)
    return fig, axes


def bar_labels(ax, bars, values, fmt=lambda v: pct(v), tops=None) -> None:
    """Value labels above each bar, or above ``tops`` (the CI upper ends) so error bars stay clear."""
    for i, (bar, v) in enumerate(zip(bars, values)):
        if v is not None:
            y = bar.get_height() if tops is None else max(bar.get_height(), tops[i])
            ax.annotate(fmt(v), (bar.get_x() + bar.get_width() / 2, y), xytext=(0, 3),
                        textcoords="offset points", ha="center", va="bottom", fontsize=8)


def save(fig, out_dir: Path, name: str) -> str:
    fig.savefig(out_dir / name)
    return name


def rate_bars(ax, labels, values, cis=None, color="#4C72B0", ylabel="accuracy") -> None:
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
    bar_labels(ax, bars, values, tops=tops)


def heatmap(fig, ax, matrix, row_labels, col_labels, title, cmap) -> None:
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
