"""Per-item knowledge estimate (docs/scope.md#knowledge-aware-scope): does the model know an item's answer
without any context?

For each item the model answers the clean row ``k`` times (greedy when ``k == 1``, otherwise sampled at
``temperature``, every sample with its own seed). ``clean_accuracy`` is the share of correct samples;

- ``known``     when ``clean_accuracy >= known_threshold``,
- ``unknown``   when ``clean_accuracy <= unknown_threshold``,
- ``uncertain`` otherwise.

``modal_share`` is the share of the most frequent parsed answer (unparsable samples count as one
answer, ``None``): the *stability* of the clean answer distribution.

Knowledge files (``knowledge.jsonl``) hold one object per item::

    {"item_id": "toy-kqz", "knowledge": "known", "clean_accuracy": 1.0, "k": 4, "modal_share": 1.0,
     "modal_answer": "4", "samples": ["4", "4", "4", "4"]}

Evaluation rows get the label as the row attribute ``knowledge`` (:func:`attach_knowledge`), and the
MIST metrics then report every statistic per label (``by_knowledge``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from .io import DataError, read_records

LABELS = ("known", "unknown", "uncertain")


def classify(clean_accuracy: float, *, known_threshold: float, unknown_threshold: float) -> str:
    """``known`` / ``unknown`` / ``uncertain`` from a clean-accuracy estimate (module docstring)."""
    if clean_accuracy >= known_threshold:
        return "known"
    if clean_accuracy <= unknown_threshold:
        return "unknown"
    return "uncertain"


def estimate_knowledge(clean_rows: Sequence[dict], backend, *, k: int, temperature: float, known_threshold: float,
                       unknown_threshold: float, max_new_tokens: int, prompt_settings=None,
                       seed: int = 0) -> dict[str, dict]:
    """``{item_id: estimate}`` over MIST ``clean`` rows (one per item), each estimate as in the module
    docstring plus ``texts`` (the ``k`` raw completions, in sample order)."""
    from .backends.base import derive_seed
    from .evaluate import build_requests
    from .parsers import parse_row_answer, row_answer_matches

    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    temp = 0.0 if k == 1 else temperature
    reqs = build_requests(clean_rows, max_new_tokens=max_new_tokens, temperature=temp,
                          prompt_settings=prompt_settings)
    reqs = [replace(q, n=k, seed=derive_seed(seed, "knowledge", r["item_id"]) if temp > 0 else None)
            for q, r in zip(reqs, clean_rows)]
    outs = backend.generate(reqs, progress=True, desc="knowledge")
    est = {}
    for row, out in zip(clean_rows, outs):
        texts = [s.text for s in out.samples]
        parsed = [parse_row_answer(t, row) for t in texts]
        correct = [row_answer_matches(p, row) for p in parsed]
        acc = sum(correct) / len(texts)
        counts = Counter(None if p is None else str(p) for p in parsed)
        modal, modal_n = counts.most_common(1)[0]
        est[row["item_id"]] = {
            "item_id": row["item_id"], "knowledge": classify(acc, known_threshold=known_threshold,
                                                             unknown_threshold=unknown_threshold),
            "clean_accuracy": acc, "k": len(texts), "modal_share": modal_n / len(texts), "modal_answer": modal,
            "samples": [None if p is None else str(p) for p in parsed], "correct": correct, "texts": texts}
    return est


def knowledge_record(est: dict) -> dict:
    """The line written to ``knowledge.jsonl`` for one estimate (raw texts and flags left out)."""
    return {k: est[k] for k in ("item_id", "knowledge", "clean_accuracy", "k", "modal_share", "modal_answer",
                                "samples")}


def summarize(estimates: dict[str, dict]) -> dict:
    """Counts per label and the mean clean accuracy per label (for ``mining_stats.json``)."""
    out: dict = {"items": len(estimates), "counts": {lab: 0 for lab in LABELS}, "mean_clean_accuracy": {}}
    for lab in LABELS:
        accs = [e["clean_accuracy"] for e in estimates.values() if e["knowledge"] == lab]
        out["counts"][lab] = len(accs)
        out["mean_clean_accuracy"][lab] = sum(accs) / len(accs) if accs else None
    return out


def load_knowledge(path: str | Path) -> dict[str, str]:
    """``{item_id: label}`` from a knowledge file; a bad line raises naming file, line and field."""
    out: dict[str, str] = {}
    for line, rec in read_records(path):
        item = rec.get("item_id")
        if not isinstance(item, str) or not item:
            raise DataError(f"expected a non-empty string, got {item!r}", path=path, line=line, field="item_id")
        label = rec.get("knowledge")
        if label not in LABELS:
            raise DataError(f"unknown knowledge label {label!r}", path=path, line=line, field="knowledge",
                            accepted="|".join(LABELS))
        if item in out:
            raise DataError(f"duplicate item_id {item!r}", path=path, line=line, field="item_id")
        out[item] = label
    return out


def attach_knowledge(rows: Sequence[dict], path: str | Path) -> list[dict]:
    """Copies of ``rows`` with the attribute ``knowledge`` from the file at ``path``; an evaluated item
    the file does not label raises (a partial split would silently change what "unknown" means)."""
    labels = load_knowledge(path)
    missing = sorted({r["item_id"] for r in rows if r["item_id"] not in labels})
    if missing:
        raise DataError(f"{len(missing)} evaluated items have no knowledge label, e.g. {missing[:3]}", path=path,
                        field="item_id", accepted="a knowledge file covering every evaluated item")
    return [{**r, "knowledge": labels[r["item_id"]]} for r in rows]
