"""Advice rows from the student's evaluation log-odds (``recipes/advise.py``)."""

from __future__ import annotations

from typing import Sequence

from selectrust.conditions import REVERSED, SEEDED
from trainer.distill.views import ForkView

__all__ = ["advice_from_log_odds"]


def advice_from_log_odds(views: Sequence[ForkView], log_odds: dict[str, float], items: dict[str, dict],
                         template: str) -> list[dict]:
    """One advice row per item: the student's A-vs-B log-odds summed over both orders, in the stored
    candidates' terms (``score = lo(seeded) - lo(reversed)``: the reversed view shows candidate_b as A),
    the favoured candidate (``candidate_a`` when score >= 0) and ``template`` rendered with ``favoured``,
    ``other`` (candidate texts) and ``score``."""
    by_item: dict[str, dict[str, float]] = {}
    for v in views:
        by_item.setdefault(v.item_id, {})[v.condition] = log_odds[v.view_id]
    rows = []
    for item_id, lo in by_item.items():
        rec = items[item_id]
        score = lo.get(SEEDED, 0.0) - lo.get(REVERSED, 0.0)
        letter = "A" if score >= 0 else "B"
        favoured, other = (rec["candidate_a"], rec["candidate_b"])[::1 if letter == "A" else -1]
        rows.append({"item_id": item_id, "task_id": rec.get("task_id"), "favoured": letter,
                     "favoured_candidate": favoured, "score": score,
                     "note": template.format(favoured=favoured.strip(), other=other.strip(), score=score)})
    return rows
