"""``python -m eval_hooks build-nq-swap --data SRC --out rows.jsonl --items N --seed S --max-context-words W``: NQ-Swap
as MIST rows in a file (docs/nq_swap.md). How the rows are made is the family's
(:mod:`eval_hooks.families.nq_swap.items`: the sources, the checks, the sampling), since the family builds them in
memory too; this module reads, builds and writes, and cuts the shipped sample."""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path
from typing import Any

from selectrust.core.io import write_jsonl_atomic
from ..families.nq_swap.items import (HUB_ID, HUB_REVISION, HUB_SPLIT, SAMPLE_PATH, build_rows, clean_passage,
                                      read_source)

__all__ = ["HUB_ID", "HUB_REVISION", "HUB_SPLIT", "SAMPLE_PATH", "build_file", "build_rows", "extract_sample",
           "read_source"]

def build_file(data: str | Path, out: str | Path, *, items: int | None = None, seed: int = 0,
               max_context_words: int | None = None) -> dict[str, Any]:
    """Read ``data`` (:func:`read_source`), build the rows (:func:`build_rows`) and write them to ``out`` (JSONL,
    atomically); returns the stats."""
    records, label = read_source(data)
    rows, stats = build_rows(records, label=label, items=items, seed=seed, max_context_words=max_context_words)
    write_jsonl_atomic(out, rows)
    return {**stats, "out": str(out)}


def extract_sample(records: list[tuple[int, dict]], out: str | Path, *, questions: int, seed: int = 0,
                   max_words: int = 150) -> int:
    """Write the records (as read, one a line) of ``questions`` questions drawn with ``seed`` among those whose every
    passage has at most ``max_words`` words; returns the lines written. ``eval_hooks/data/nq_swap_sample.jsonl`` is
    ``extract_sample(read_source("nqswap.zip")[0], out, questions=50, seed=0, max_words=120)``."""
    by_q: dict[str, list[dict]] = defaultdict(list)
    for _, rec in records:
        by_q[rec["question"]].append(rec)
    short = sorted(q for q, recs in by_q.items() if all(
        len(clean_passage(r[f]).split()) <= max_words for r in recs for f in ("org_context", "sub_context")))
    keep = set(random.Random(seed).sample(short, min(questions, len(short))))
    lines = [rec for _, rec in records if rec["question"] in keep]
    write_jsonl_atomic(out, lines)
    return len(lines)
