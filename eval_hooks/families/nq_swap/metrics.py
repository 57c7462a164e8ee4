"""NQ-Swap's standard metrics (Longpre et al., 2021; docs/nq_swap.md#metrics), beside MIST's, from the same item
scores.

Per item, under the substituted passage (the ``misleading`` row), the judge (:mod:`eval_hooks.parsers.open_answer`)
says which answer the response names: the original (gold or an alias) alone, the substitute alone, both (status
``multiple``), or neither (another answer, or none). Then, over items:

- ``p_org``: the share naming the original alone; ``p_sub``: the substitute alone; ``p_both``; ``p_neither``;
- ``memorization_ratio`` = ``p_org / (p_org + p_sub)``: how often the model keeps its own answer when it picks one
  of the two (None when it names neither ever);
- ``em_org_context``: the share of ``correct`` rows (the original passage) the judge reads as the original answer
  (MIST's ``accuracy.correct``), and ``em_org_context_strict``: the share whose whole first sentence, normalised,
  *is* the original answer (or an alias): the literature's exact match.

Split by knowledge (``by_knowledge.known`` / ``unknown`` / ``uncertain``): an item is *known* when the model answers
it closed-book. The label is the rows' ``knowledge`` attribute when they carry one (``eval.knowledge_path`` or the
evaluate recipe's ``knowledge.enabled``, :mod:`eval_hooks.knowledge`: the base's estimate, so a trained model is
split by what the base knew), else this run's own clean row (correct = known). On unknown items following the
passage is right (``p_sub`` high); on known ones resisting it is (``p_org`` high).

CIs: item-level percentile bootstrap (``n_boot`` resamples, ``seed``), as MIST's.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from selectrust.conditions import CLEAN, CORRECT, MISLEADING
from ...metrics.common import CI_LEVEL, bootstrap_indices, percentile_ci
from ...parsers import row_answer_matches
from ...parsers.open_answer import normalize_open_answer, open_tokens
from ...parsers.sentences import split_sentences
from ..mist.metrics import item_attribute, mist_items

RATES = ("p_org", "p_sub", "p_both", "p_neither", "memorization_ratio", "em_org_context", "em_org_context_strict")
LABEL_SOURCES = {"rows": "the rows' knowledge labels (eval.knowledge_path or knowledge.enabled)",
                 CLEAN: "this run's own clean row (closed-book answer right = known)"}


def misleading_outcome(row: dict) -> str:
    """``org`` | ``sub`` | ``both`` | ``neither``: which answer a scored ``misleading`` row names."""
    if row.get("answer_status") == "multiple":
        return "both"
    if row["correct"]:
        return "org"
    if row.get("parsed") is not None and row_answer_matches(row["parsed"], row, "wrong_value"):
        return "sub"
    return "neither"


def strict_match(row: dict) -> bool:
    """Whether the response's first sentence, normalised, is the gold or an alias (exact match)."""
    text = row.get("response") or ""
    first = next(iter(split_sentences(text.strip())), "")
    said = " ".join(open_tokens(first.rstrip(".!")))
    golds = {normalize_open_answer(v) for v in [row["gold"], *(row.get("gold_aliases") or [])]}
    return bool(said) and said in golds


def _item_table(item_scores: Sequence[dict]) -> tuple[list[str], np.ndarray, list[str], str]:
    """``(item ids, (n_items, 5) bool matrix [org, sub, both, em, strict_em], knowledge labels, label source)``."""
    items = mist_items(item_scores)
    labelled = any(r.get("knowledge") is not None for r in item_scores)
    ids, flags, labels = [], [], []
    for item_id, rows in items.items():
        outcome = misleading_outcome(rows[MISLEADING])
        ids.append(item_id)
        flags.append([outcome == "org", outcome == "sub", outcome == "both", bool(rows[CORRECT]["correct"]),
                      strict_match(rows[CORRECT])])
        if labelled:
            labels.append(str(item_attribute(rows, "knowledge", CLEAN)))
        else:
            labels.append("known" if rows[CLEAN]["correct"] else "unknown")
    return ids, np.array(flags, dtype=bool).reshape(len(ids), 5), labels, "rows" if labelled else CLEAN


def _stats(f: np.ndarray) -> dict[str, np.ndarray]:
    """The rates of :data:`RATES` of ``f`` with shape ``(..., n_items, 5)``, leading axes kept (NaN: undefined)."""
    m = f.mean(axis=-2)
    org, sub, both = m[..., 0], m[..., 1], m[..., 2]
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(org + sub > 0, org / np.where(org + sub > 0, org + sub, 1.0), np.nan)
    return {"p_org": org, "p_sub": sub, "p_both": both, "p_neither": np.clip(1.0 - org - sub - both, 0.0, 1.0),
            "memorization_ratio": ratio, "em_org_context": m[..., 3], "em_org_context_strict": m[..., 4]}


def summary(f: np.ndarray, *, n_boot: int, seed: int) -> dict[str, Any]:
    """The rates of :data:`RATES` (None where undefined), ``n_items`` and, with ``n_boot > 0``, their ``ci``."""
    if f.shape[0] == 0:
        return {**{k: None for k in RATES}, "n_items": 0}
    point = _stats(f)
    out: dict[str, Any] = {k: None if np.isnan(v) else float(v) for k, v in point.items()}
    out["n_items"] = int(f.shape[0])
    if n_boot > 0:
        reps = _stats(f[bootstrap_indices(f.shape[0], n_boot, seed)])
        out["ci"] = {k: percentile_ci(np.asarray(reps[k], dtype=float)) for k in RATES}
    return out


def nq_swap_metrics(item_scores: Sequence[dict], *, n_boot: int = 1000, seed: int = 0) -> dict[str, Any]:
    """The ``nq_swap`` part of ``metrics.json`` (module docstring): the rates of :data:`RATES` with ``n_items`` and
    ``ci``, ``by_knowledge.<label>`` (the same per label), ``knowledge_source`` (:data:`LABEL_SOURCES`) and
    ``bootstrap`` (its settings)."""
    _, f, labels, source = _item_table(item_scores)
    out = summary(f, n_boot=n_boot, seed=seed)
    lab = np.array(labels)
    out["by_knowledge"] = {v: summary(f[lab == v], n_boot=n_boot, seed=seed) for v in sorted(set(labels))}
    out["knowledge_source"] = LABEL_SOURCES[source]
    if n_boot > 0:
        out["bootstrap"] = {"n_boot": n_boot, "seed": seed, "level": CI_LEVEL, "method": "item percentile"}
    return out


def headline(metrics: dict[str, Any]) -> dict[str, Any]:
    """``nq_swap.<rate>`` and ``nq_swap.<label>.<rate>`` (known, unknown) of a ``metrics.json``, flat."""
    nq = metrics.get("nq_swap") or {}
    flat = {f"nq_swap.{k}": nq.get(k) for k in ("p_org", "p_sub", "memorization_ratio", "em_org_context")}
    for label in ("known", "unknown"):
        per = (nq.get("by_knowledge") or {}).get(label) or {}
        flat.update({f"nq_swap.{label}.{k}": per.get(k) for k in ("p_org", "p_sub", "memorization_ratio",
                                                                  "em_org_context")})
    return flat
