"""Human-readable evaluation reports: ``report.md`` (tables) plus PNG plots, one set per family.

``write_report`` reads only a ``metrics.json`` dict (from :func:`eval_hooks.compute_metrics`)
and the item scores it came from; each family writes its own section
(``eval_hooks/families/<name>/report.py``, built from :mod:`eval_hooks.scoring.report_kit`). ``compare_table``
renders several runs side by side (before/after training) for the demo and the trainers.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from .families import get_family
from .evaluate import headline
from .scoring.report_kit import md_table, pct, pp


def write_report(family: str, metrics: dict, item_scores: Sequence[dict], out_dir: str | Path, *,
                 title: str | None = None) -> Path:
    """Write ``out_dir/report.md`` and the family's PNG plots; return the path of ``report.md``.

    Plots: MIST ``mist_accuracy.png`` (per-condition bars with CIs, SC2W); Box2 ``box2_scores.png``
    and ``box2_recovery.png``; Taste ``taste_paired_outcomes.png`` and ``taste_cells.png``; Med
    ``med_rates.png`` (EA and Uncertain heatmaps; the Med run: ``ea_vs_uncertain.png``, ``label_probs.png``).
    """
    return get_family(family).write_report(metrics, item_scores, out_dir, title=title)


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
