"""What both demos' orchestration shares (:mod:`toy_demo.pipeline`, :mod:`toy_demo.real`): the thread setting
and writing the results at the end. A stage's config is composed by ``recipes.chain.compose``, as the chain runner
composes it."""

from __future__ import annotations

from pathlib import Path
from typing import Callable


def set_threads(n: int | None) -> None:
    """torch intra-op threads for every stage of the demo (None: torch's default)."""
    if n:
        import torch

        torch.set_num_threads(n)


def finish(out: Path, summary: dict, write_report: Callable[[dict, Path], None],
           print_table: Callable[[dict], None]) -> dict:
    """Write ``<out>/summary.json`` and the report (``report.md`` and plots), print the table; return ``summary``."""
    from eval_hooks.io import write_json_atomic

    write_json_atomic(out / "summary.json", summary)
    write_report(summary, out)
    print_table(summary)
    print(f"[demo] done in {summary['wall_seconds']:.0f} s: {out / 'report.md'}, {out / 'summary.json'}", flush=True)
    return summary
