"""Task-disjoint folds of Taste items (``python -m eval_hooks split-folds``).

Items are grouped by ``task_id``; the task groups are shuffled with ``random.Random(seed)``, then
placed largest first (stable, so the shuffle breaks ties) into the fold that currently holds the
fewest items (lowest index on ties). Every item lands in exactly one fold, no task is in two folds,
and fold sizes differ by at most the size of the largest task group.
"""

from __future__ import annotations

import random
from collections import defaultdict
from pathlib import Path

from .families import get_family
from selectrust.core.io import DataError, read_records, write_json_atomic, write_jsonl_atomic


def split_task_folds(records: list[tuple[int, dict]], k: int, seed: int, *, path=None) -> list[list[dict]]:
    """``k`` lists of records (file order kept inside each fold)."""
    if k < 2:
        raise DataError(f"need k >= 2 folds, got {k}", field="k", accepted="an integer >= 2")
    groups: dict[str, list[tuple[int, dict]]] = defaultdict(list)
    for line, rec in records:
        tid = rec.get("task_id")
        if tid is None or isinstance(tid, bool) or not isinstance(tid, (str, int)) or not str(tid).strip():
            raise DataError("missing task_id: folds are task-disjoint, so every item needs one", path=path, line=line,
                            field="task_id", accepted="a non-empty string or an integer (mined items carry it)")
        groups[str(tid)].append((line, rec))
    if len(groups) < k:
        raise DataError(f"{len(groups)} distinct task_id(s) cannot fill {k} task-disjoint folds", path=path,
                        field="task_id", accepted=f"at least {k} tasks")
    tasks = sorted(groups)
    random.Random(seed).shuffle(tasks)
    tasks.sort(key=lambda t: -len(groups[t]))
    folds: list[list[tuple[int, dict]]] = [[] for _ in range(k)]
    for t in tasks:
        min(folds, key=len).extend(groups[t])  # min() returns the first of equal sizes: lowest index
    return [[rec for _, rec in sorted(f, key=lambda x: x[0])] for f in folds]


def split_folds_file(data: str | Path, k: int, seed: int, out: str | Path, *, family: str = "taste") -> dict:
    """Validate ``data`` as ``family`` items, split it, write ``out/fold_<i>.jsonl`` and ``out/folds.json``."""
    records = read_records(data)
    get_family(family).expand_records(records, data)  # full item validation, file/line/field errors
    folds = split_task_folds(records, k, seed, path=data)
    out = Path(out)
    summary = {"data": str(data), "k": k, "seed": seed, "sizes": [len(f) for f in folds],
               "tasks": [sorted({str(r["task_id"]) for r in f}) for f in folds]}
    for i, f in enumerate(folds):
        write_jsonl_atomic(out / f"fold_{i}.jsonl", f)
    write_json_atomic(out / "folds.json", summary)
    return summary
