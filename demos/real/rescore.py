"""Rescore a real demo's saved outputs with the current judge: ``python -m demos.real.rescore OUT_DIR``.

Reads every finished stage (``stages/<name>/stage_complete.json`` present) that has an ``item_scores.jsonl``, scores
each row's saved ``response`` again through the family's ``score_row`` (the judge of today), and prints the rows
whose verdict or ``answer_status`` changed against the stored ones (the judge the run had), then the counts per stage
and condition, and how many changed at all and how many verdicts moved (correct <-> wrong). Nothing is written; no
model loads."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

from selectrust.core.io import read_records
from eval_hooks.families import get_family

_DROP = ("response", "parsed", "parse_ok", "correct", "answer_status")


def rescore_stage(item_scores: Path) -> list[dict]:
    """The rows of one ``item_scores.jsonl`` whose verdict or status the current judge changes: each
    ``{row_id, condition, response, old: (verdict, status, parsed), new: (verdict, status, parsed)}``."""
    mist = get_family("mist")
    changed = []
    for _, row in read_records(item_scores):
        new = mist.score_row({k: v for k, v in row.items() if k not in _DROP}, row["response"])
        before = ("correct" if row["correct"] else "wrong", row.get("answer_status"), row.get("parsed"))
        after = ("correct" if new["correct"] else "wrong", new["answer_status"], new["parsed"])
        if before[:2] != after[:2]:
            changed.append({"row_id": row["row_id"], "condition": row["condition"], "response": row["response"],
                            "old": before, "new": after})
    return changed


def main(argv: list[str]) -> int:
    """Print the changed verdicts of every finished stage of ``argv[0]`` (an out dir); exit 2 on a bad out dir."""
    if len(argv) != 1 or not (Path(argv[0]) / "stages").is_dir():
        print("usage: python -m demos.real.rescore OUT_DIR (a real demo's out dir, holding stages/)", file=sys.stderr)
        return 2
    counts: Counter = Counter()
    for stage in sorted((Path(argv[0]) / "stages").iterdir()):
        scores = stage / "item_scores.jsonl"
        if not (stage / "stage_complete.json").is_file() or not scores.is_file():
            continue
        for c in rescore_stage(scores):
            counts[(stage.name, c["condition"], c["old"][0], c["new"][0])] += 1
            print(f"{stage.name}\t{c['row_id']}\t{c['old'][0]}/{c['old'][1]} -> {c['new'][0]}/{c['new'][1]}\t"
                  f"{c['response'][:100]!r}")
    for (stage, cond, old, new), n in sorted(counts.items()):
        print(f"COUNT {stage} {cond} {old}->{new}: {n}")
    print(f"changed verdicts or statuses: {sum(counts.values())}")
    print(f"verdicts moved (correct <-> wrong): {sum(n for (_, _, old, new), n in counts.items() if old != new)}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
