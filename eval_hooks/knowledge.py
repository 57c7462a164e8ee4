"""Per-item knowledge estimate (docs/scope.md#knowledge-aware-scope): does the model know an item's answer
without any context?

For each item the model answers the clean row ``k`` times (greedy when ``k == 1``, otherwise sampled at
``temperature``, every sample with its own seed). ``clean_accuracy`` is the share of correct samples.
``modal_share`` is the share of the most frequent parsed answer (unparsable samples count as one
answer, ``None``): the *stability* of the clean answer distribution.

The label comes from one per-item ``score`` in [0, 1] (``scored_by``, :data:`SCORES`):

- ``accuracy``: ``clean_accuracy`` (with ``k == 1``: 1 when the greedy answer is right, else 0);
- ``greedy_prob``: the greedy clean answer's correctness weighted by its probability ``p``
  (``answer_prob``: the geometric mean of its tokens' probabilities, end-of-sequence token included):
  ``(1 + p) / 2`` when it is right, ``(1 - p) / 2`` when it is wrong; so ``score >= 0.75`` is "right
  with ``p >= 0.5``", ``score <= 0.25`` "wrong with ``p >= 0.5``". It needs a backend that returns
  token log-probs (not ``openai_chat``). With ``k > 1`` the greedy answer is asked besides the ``k``
  samples (in evaluation and mining the clean rows' own greedy answers, so under
  :class:`~selectrust.generation.backends.base.GreedyMemo` it costs nothing);
- ``combined`` (``k >= 2``): the mean of the two above, ``greedy_prob``'s score and the ``k`` samples'
  accuracy. A wrong greedy answer scores below 0.75 and a right one above 0.25, so with thresholds
  0.75 / 0.25 a known item is one the model answers right greedily, with confidence and mostly right
  when sampled, and an unknown one it answers wrong greedily, confidently or mostly wrong when sampled.

and the thresholds:

- ``known``     when ``score >= known_threshold``,
- ``unknown``   when ``score <= unknown_threshold``,
- ``uncertain`` otherwise.

Knowledge files (``knowledge.jsonl``) hold one object per item::

    {"item_id": "toy-kqz", "knowledge": "known", "score": 1.0, "scored_by": "accuracy", "clean_accuracy": 1.0,
     "k": 4, "modal_share": 1.0, "modal_answer": "4", "samples": ["4", "4", "4", "4"]}

plus, whenever a greedy answer was generated (``k == 1``, ``greedy_prob`` or ``combined``), ``greedy_answer`` (parsed),
``greedy_correct`` and ``answer_prob`` (``null`` without log-probs). Files written before ``score``
existed are read with ``clean_accuracy`` as the score.

Evaluation rows get the label as the row attribute ``knowledge`` (:func:`attach_knowledge`), and the
MIST metrics then report every statistic per label (``by_knowledge``). :func:`knowledge_quality` says how
well an estimate predicts an evaluation's correctness (ROC AUC, calibration table, accuracy per label).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Mapping, Sequence

from selectrust.conditions import CLEAN
from selectrust.core.io import DataError, read_records

LABELS = ("known", "unknown", "uncertain")
#: What a label's thresholds apply to (module docstring); ``knowledge.score``.
SCORES = ("accuracy", "greedy_prob", "combined")
#: Per-item numbers of a knowledge file that :func:`knowledge_quality` can rank items by.
SCORE_FIELDS = ("score", "clean_accuracy", "modal_share", "answer_prob")
RECORD_FIELDS = ("item_id", "knowledge", "score", "scored_by", "clean_accuracy", "k", "modal_share", "modal_answer",
                 "samples", "greedy_answer", "greedy_correct", "answer_prob")


def classify(score: float, *, known_threshold: float, unknown_threshold: float) -> str:
    """``known`` / ``unknown`` / ``uncertain`` from an item's score (module docstring)."""
    if score >= known_threshold:
        return "known"
    if score <= unknown_threshold:
        return "unknown"
    return "uncertain"


def answer_prob(sample) -> float | None:
    """The geometric mean of the probabilities of a completion's tokens (``exp`` of their mean log-prob, at
    temperature 1, the end-of-sequence token included), or ``None`` when the backend returned no log-probs."""
    lps = list(sample.logprobs or [])
    if not lps:
        return None
    return math.exp(sum(lps) / len(lps))


def greedy_prob_score(correct: bool, prob: float) -> float:
    """``greedy_prob``'s score: ``(1 + prob) / 2`` for a right greedy answer, ``(1 - prob) / 2`` for a wrong one."""
    return (1.0 + prob) / 2.0 if correct else (1.0 - prob) / 2.0


def estimate_knowledge(clean_rows: Sequence[dict], backend, *, k: int, temperature: float, known_threshold: float,
                       unknown_threshold: float, max_new_tokens: int, prompt_settings=None, seed: int = 0,
                       score: str = "accuracy") -> dict[str, dict]:
    """``{item_id: estimate}`` over MIST ``clean`` rows (one per item), each estimate as in the module
    docstring plus ``correct`` and ``texts`` (the ``k`` raw completions, in sample order)."""
    from selectrust.generation.backends.base import derive_seed
    from .evaluate import build_requests
    from .parsers import parse_row_answer, row_answer_matches

    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if score not in SCORES:
        raise ValueError(f"unknown knowledge score {score!r} (accepted: {'|'.join(SCORES)})")
    if score == "combined" and k < 2:
        raise ValueError("knowledge score combined needs k >= 2 samples besides the greedy answer")
    greedy = k == 1 or score in ("greedy_prob", "combined")
    base = build_requests(clean_rows, max_new_tokens=max_new_tokens, temperature=0.0, prompt_settings=prompt_settings)
    reqs = list(base) if greedy else []
    if k > 1:
        reqs += [replace(q, n=k, temperature=temperature, seed=derive_seed(seed, "knowledge", r["item_id"]))
                 for q, r in zip(base, clean_rows)]
    outs = backend.generate(reqs, progress=True, desc="knowledge")
    greedy_outs = outs[:len(clean_rows)] if greedy else [None] * len(clean_rows)
    sampled_outs = outs[-len(clean_rows):]  # with k == 1 the greedy answers are the samples
    est = {}
    for row, g_out, out in zip(clean_rows, greedy_outs, sampled_outs):
        texts = [s.text for s in out.samples]
        parsed = [parse_row_answer(t, row) for t in texts]
        correct = [row_answer_matches(p, row) for p in parsed]
        acc = sum(correct) / len(texts)
        counts = Counter(None if p is None else str(p) for p in parsed)
        modal, modal_n = counts.most_common(1)[0]
        e = {"item_id": row["item_id"], "score": acc, "scored_by": score, "clean_accuracy": acc, "k": len(texts),
             "modal_share": modal_n / len(texts), "modal_answer": modal,
             "samples": [None if p is None else str(p) for p in parsed], "correct": correct, "texts": texts}
        if g_out is not None:
            g_parsed = parse_row_answer(g_out.samples[0].text, row)
            e.update(greedy_answer=None if g_parsed is None else str(g_parsed),
                     greedy_correct=row_answer_matches(g_parsed, row), answer_prob=answer_prob(g_out.samples[0]))
        if score != "accuracy":
            if e["answer_prob"] is None:
                raise ValueError(f"knowledge score {score} needs token log-probs; backend "
                                 f"{getattr(backend, 'name', type(backend).__name__)!r} returned none")
            e["score"] = greedy_prob_score(e["greedy_correct"], e["answer_prob"])
            if score == "combined":
                e["score"] = (e["score"] + acc) / 2.0
        e["knowledge"] = classify(e["score"], known_threshold=known_threshold, unknown_threshold=unknown_threshold)
        est[row["item_id"]] = e
    return est


def estimate_from_config(clean_rows: Sequence[dict], backend, kcfg, *, max_new_tokens: int, prompt_settings=None,
                         seed: int = 0) -> dict[str, dict]:
    """:func:`estimate_knowledge` with the settings of a ``knowledge`` config group (``k``, ``temperature``,
    ``score``, ``known_threshold``, ``unknown_threshold``)."""
    return estimate_knowledge(clean_rows, backend, k=kcfg.k, temperature=kcfg.temperature, score=str(kcfg.score),
                              known_threshold=kcfg.known_threshold, unknown_threshold=kcfg.unknown_threshold,
                              max_new_tokens=max_new_tokens, prompt_settings=prompt_settings, seed=seed)


def knowledge_record(est: dict) -> dict:
    """The line written to ``knowledge.jsonl`` for one estimate (raw texts and flags left out)."""
    return {k: est[k] for k in RECORD_FIELDS if k in est}


def summarize(estimates: dict[str, dict]) -> dict:
    """Counts per label, and the mean clean accuracy and mean score per label (for ``mining_stats.json``)."""
    out: dict = {"items": len(estimates), "counts": {lab: 0 for lab in LABELS}, "mean_clean_accuracy": {},
                 "mean_score": {}}
    for lab in LABELS:
        chosen = [e for e in estimates.values() if e["knowledge"] == lab]
        out["counts"][lab] = len(chosen)
        for key, field in (("mean_clean_accuracy", "clean_accuracy"), ("mean_score", "score")):
            out[key][lab] = sum(e[field] for e in chosen) / len(chosen) if chosen else None
    return out


def read_estimates(path: str | Path) -> dict[str, dict]:
    """``{item_id: record}`` from a knowledge file, each record with a ``score`` (``clean_accuracy`` for files
    written before scores existed); a bad line raises naming file, line and field."""
    out: dict[str, dict] = {}
    for line, rec in read_records(path):
        item = rec.get("item_id")
        if not isinstance(item, str) or not item:
            raise DataError(f"expected a non-empty string, got {item!r}", path=path, line=line, field="item_id")
        if rec.get("knowledge") not in LABELS:
            raise DataError(f"unknown knowledge label {rec.get('knowledge')!r}", path=path, line=line,
                            field="knowledge", accepted="|".join(LABELS))
        if item in out:
            raise DataError(f"duplicate item_id {item!r}", path=path, line=line, field="item_id")
        rec = {**rec, "score": rec.get("score", rec.get("clean_accuracy"))}
        for field in SCORE_FIELDS:
            v = rec.get(field)
            if v is not None and (isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= 1):
                raise DataError(f"expected a number in [0, 1], got {v!r}", path=path, line=line, field=field)
        out[item] = rec
    return out


def load_knowledge(path: str | Path) -> dict[str, str]:
    """``{item_id: label}`` from a knowledge file; a bad line raises naming file, line and field."""
    return {item: rec["knowledge"] for item, rec in read_estimates(path).items()}


def attach_knowledge(rows: Sequence[dict], path: str | Path) -> list[dict]:
    """Copies of ``rows`` with the attribute ``knowledge`` from the file at ``path``; an evaluated item
    the file does not label raises (a partial split would silently change what "unknown" means)."""
    labels = load_knowledge(path)
    _require_labelled({r["item_id"] for r in rows}, labels, path)
    return [{**r, "knowledge": labels[r["item_id"]]} for r in rows]


def _require_labelled(items, labels: Mapping[str, object], path) -> None:
    missing = sorted(i for i in items if i not in labels)
    if missing:
        raise DataError(f"{len(missing)} evaluated items have no knowledge label, e.g. {missing[:3]}", path=path,
                        field="item_id", accepted="a knowledge file covering every evaluated item")


def knowledge_quality(knowledge_path: str | Path, item_scores_path: str | Path, *, score: str = "score",
                      condition: str = CLEAN, n_bins: int = 5) -> dict:
    """How well a knowledge estimate predicts an evaluation's correctness, over the items of the evaluation (every
    one needs an estimate; estimates of other items are ignored): the ``correct`` of each item's ``condition`` row
    in ``item_scores.jsonl`` against the estimate's ``score`` field (:data:`SCORE_FIELDS`).

    Returns ``{"score", "condition", "items", "positives", "auc", "calibration", "ece", "counts", "accuracy"}``:
    the ROC AUC of the score (``None`` when every item is right, or every one wrong), the calibration table and
    expected calibration error (:mod:`eval_hooks.metrics.calibration`), and the number of items and their
    accuracy per knowledge label (``None`` for an empty label)."""
    from .metrics.calibration import calibration_table, expected_calibration_error, roc_auc

    if score not in SCORE_FIELDS:
        raise ValueError(f"unknown score field {score!r} (accepted: {'|'.join(SCORE_FIELDS)})")
    est = read_estimates(knowledge_path)
    outcome: dict[str, bool] = {}
    for line, rec in read_records(item_scores_path):
        if rec.get("condition") != condition:
            continue
        if not isinstance(rec.get("correct"), bool):
            raise DataError(f"expected true or false, got {rec.get('correct')!r}", path=item_scores_path,
                            line=line, field="correct")
        outcome[rec.get("item_id")] = rec["correct"]
    if not outcome:
        raise DataError(f"no {condition!r} rows", path=item_scores_path, field="condition")
    _require_labelled(outcome, est, knowledge_path)
    items = sorted(outcome)
    missing = [i for i in items if est[i].get(score) is None]
    if missing:
        raise DataError(f"{len(missing)} items have no {score!r}, e.g. {missing[:3]}", path=knowledge_path,
                        field=score)
    s, y = [est[i][score] for i in items], [outcome[i] for i in items]
    table = calibration_table(s, y, n_bins=n_bins)
    per_label = {lab: [outcome[i] for i in items if est[i]["knowledge"] == lab] for lab in LABELS}
    return {"score": score, "condition": condition, "items": len(items), "positives": sum(y), "auc": roc_auc(s, y),
            "calibration": table, "ece": expected_calibration_error(table),
            "counts": {lab: len(v) for lab, v in per_label.items()},
            "accuracy": {lab: (sum(v) / len(v) if v else None) for lab, v in per_label.items()}}
