"""``real.base_only=true``: the real demo's base stages alone, no arm (issue 60, Deliver 2).

On the fixed split the base's work (its evaluations with the knowledge estimate, NQ-Swap's, mining) is the same in
every seed's run (:data:`demos.real.pipeline.SEEDLESS`). Run once with ``real.stage_cache=DIR`` before the seeds, it
fills the cache the seeds' runs then reuse, so a seed pays for its trained arms alone; and it measures the base on a
split, NQ-Swap's fixed set included, without training or evaluating any arm there. Its ``summary.json`` holds the
base's metrics per evaluated set (``real``, ``transfer``, ``nq_swap``: each stage's ``metrics.json``) under
``base_only: true``; the report is one table.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eval_hooks.scoring.report_kit import ci_text, md_table, pct
from selectrust.conditions import MIST_CONDITIONS as CONDS
from selectrust.core.io import write_text_atomic

from ..common import wall_line
from . import nq_swap
from .arms import BASE
from .items import facts_size

NQ_MEASURES = ("em_org_context", "em_org_context_strict", "p_sub", "p_org")


def summary(cfg, results: dict[str, Any], sets: dict[str, tuple[str, str]]) -> dict:
    """``summary.json`` of a base-only run: the run's settings, ``mining`` (its counts) and the base's
    ``metrics.json`` of every evaluated set (``sets``: key -> (stage prefix, items file)) and of NQ-Swap."""
    out = {"demo": cfg.demo, "base_only": True, "size": facts_size(cfg), "split": str(cfg.real.split),
           "seed": cfg.seed, "model": cfg.real.model}
    for key, (prefix, _) in sets.items():
        out[key] = {BASE.name: results[f"{prefix}_{BASE.name}"]}
    out.update(nq_swap.summary_part(cfg, results, [BASE.name]))
    out["items"] = nq_swap.items_entry(cfg, results)
    out["mining"] = {k: v for k, v in results["mine"].items() if k not in ("dropped_items", "knowledge_items")}
    return out


def rows(summary: dict) -> list[list[str]]:
    """The table's rows: per evaluated set, the base's accuracy per condition, SC2W and unknown-correct; per
    NQ-Swap measure, the base's value with its question-clustered interval."""
    out = []
    for key in ("real", "transfer"):
        if key not in summary:
            continue
        m = summary[key][BASE.name]
        out.append([key, str(m.get("n_items")), *(pct(m["accuracy"][c]) for c in CONDS), pct(m.get("sc2w")),
                    pct(m.get("unknown_correct_accuracy"))])
    nq = ((summary.get(nq_swap.KEY) or {}).get(BASE.name) or {}).get("nq_swap") or {}
    for name in NQ_MEASURES:
        if name in nq:
            ci = (nq.get("ci") or {}).get(name)
            out.append([f"NQ-Swap {name}", str(nq.get("n_items")), pct(nq[name]) + (f" {ci_text(ci)}" if ci else ""),
                        *[""] * (len(CONDS) + 1)])
    return out


HEADER = ["set", "items", *CONDS, "SC2W", "unknown-correct"]


def write_report(summary: dict, out: Path) -> None:
    """``report.md``: the base's table and the stage times."""
    text = (f"# The base alone (real.base_only), split {summary['split']}, facts {summary['size']}\n\n"
            + md_table(HEADER, rows(summary)) + "\n\n" + wall_line(summary) + "\n")
    write_text_atomic(Path(out) / "report.md", text)


def print_table(summary: dict) -> None:
    """The base's table on the terminal."""
    for r in [HEADER, *rows(summary)]:
        print("  " + " | ".join(r), flush=True)
