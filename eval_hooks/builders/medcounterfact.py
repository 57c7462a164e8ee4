"""Build a MedCounterfact items file (docs/medcounterfact.md#substitutions) from MedEvidence
(``medevidence_abstract.jsonl``): the ``build-medcounterfact`` CLI verb. How an item is made (the intervention T and
its comparator read from the question, T's aliases, the substitution, the verifier, the optional model rewrite) is
the family's own, :mod:`eval_hooks.families.med.items`, which the family also uses to build a raw MedEvidence file
in memory; this builder validates the records, writes the items and the stats beside them.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from selectrust.core.hashing import file_sha256
from selectrust.core.io import DataError, read_records, write_jsonl_atomic
from ..families.med.items import CATEGORIES, build_items

__all__ = ["CATEGORIES", "build_file"]


def _most_common_reason(stats: dict) -> str:
    """Why records were not kept, the most frequent first: ``"field 'question': missing or empty question
    (4 records, e.g. line 1)"``."""
    reasons = Counter((b["field"], b["problem"]) for b in stats["invalid_records"])
    if stats.get("dropped_label"):
        reasons[("answer", "a label that is not kept (uncertain effect / insufficient data)")] = stats["dropped_label"]
    if not reasons:
        return "no record in the file"
    (field, problem), n = reasons.most_common(1)[0]
    first = next((b["line"] for b in stats["invalid_records"] if (b["field"], b["problem"]) == (field, problem)), None)
    return f"field '{field}': {problem} ({n} record(s){f', e.g. line {first}' if first else ''})"


def build_file(data: str | Path, out: str | Path, **kwargs) -> dict:
    """Build and write the items, and the stats beside them (``<out>.stats.json``: counts, excluded items
    with reasons, ``input_sha256``, ``term_list_versions``); returns the stats."""
    from selectrust.core.io import write_json_atomic

    records = read_records(data)
    items, stats = build_items(records, path=str(data), **kwargs)
    if not items:
        raise DataError(f"no item kept from {len(records)} record(s); the most common reason: "
                        f"{_most_common_reason(stats)} (nothing was written)", path=data)
    stats["input"] = str(data)
    stats["input_sha256"] = file_sha256(data)
    stats["out"] = str(out)
    write_jsonl_atomic(out, items)
    write_json_atomic(f"{out}.stats.json", stats)
    return stats
