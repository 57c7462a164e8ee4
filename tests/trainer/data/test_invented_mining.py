"""Issue 61's invented entities in mining: rows of ``source: invented`` (``build-facts --invented-items``) feed the
unknown pools when the base does not know them, and never become a SCOPE quartet, even when the base gives the
invented answer by chance or a fallback elicits it; mining_stats counts them. A scripted backend answers the real
rows the builder writes."""

from __future__ import annotations

from collections import Counter

import pytest

from eval_hooks.builders.facts import SAMPLE_PATH, FactsSettings, build_facts, load_geonames
from mining_fakes import TableBackend
from trainer.config import KnowledgeConfig
from trainer.data.mining import mine


@pytest.fixture(scope="module")
def rows():
    """Two GeoNames training items and three invented items (one relation), as the builder writes them."""
    splits, _ = build_facts(load_geonames(SAMPLE_PATH), FactsSettings(invented_items=3, fixed_split=1))
    real_ids = sorted({r["item_id"] for r in splits["train"] if r["source"] == "geonames"})[:2]
    inv_ids = sorted({r["item_id"] for r in splits["train"] if r["source"] == "invented"})
    keep = set(real_ids + inv_ids)
    return [r for r in splits["train"] if r["item_id"] in keep], real_ids, inv_ids


def _by(rows):
    out = {}
    for r in rows:
        out.setdefault(r["item_id"], {})[r["condition"]] = r
    return out


def _table(rows, knows: set[str]) -> dict:
    """The base: answers a context's value (follows every hint); when clean, the gold for items of ``knows``, else a
    wrong name; a fallback (the note names the gold) gives the gold. Contexts first: a clean prompt is a suffix of
    every other prompt of its item."""
    table = {}
    for i, conds in _by(rows).items():
        table[f"NOTE {conds['clean']['gold']}\n"] = f"The answer is {conds['clean']['gold']}."
        for c in ("misleading", "correct", "irrelevant"):
            r = conds[c]
            said = r["wrong_value"] if c == "misleading" else r["gold"] if c == "correct" else "Nowhere"
            table[r["context"]] = f"The answer is {said}."
    for i, conds in _by(rows).items():
        table[conds["clean"]["prompt"]] = f"The answer is {conds['clean']['gold'] if i in knows else 'Nowhere'}."
    return table


def _mine(rows, knows, knowledge):
    return mine(rows, TableBackend(_table(rows, knows)), max_new_tokens=16, use_fallback=True,
                fallback_note="NOTE {gold}", leak_patterns=[], model_name="m", knowledge=knowledge, seed=0)


def test_unknown_invented_items_feed_unknown_correct_and_known_ones_never_a_quartet(rows):
    rows, real_ids, inv_ids = rows
    lucky = inv_ids[0]  # the base "knows" this invented item by chance (its clean answer is the gold)
    pairs, stats = _mine(rows, {*real_ids, lucky}, KnowledgeConfig(enabled=True, k=1))
    quartets = {p["item_id"] for p in pairs if "pool" not in p}
    assert quartets == set(real_ids)  # the GeoNames items the base knows and on which it follows the hint
    unknown = {p["item_id"] for p in pairs if p.get("pool") == "unknown_correct"}
    assert unknown == set(inv_ids[1:])
    assert stats["invented"] == {"items": 3, "kept_out_of_quartets": 1, "by_knowledge": {"known": 1, "unknown": 2},
                                 "per_pool": {"unknown_correct": 2}}
    assert stats["kept"] == 2 and stats["items"] == 5


def test_plain_mining_with_fallback_makes_no_quartet_of_an_invented_item(rows):
    rows, real_ids, inv_ids = rows
    pairs, stats = _mine(rows, set(), None)  # the base knows nothing: every quartet would come from a fallback
    by_source = Counter(p["chosen_source"] for p in pairs)
    assert {p["item_id"] for p in pairs} == set(real_ids) and by_source == {"fallback": 8}
    assert stats["invented"] == {"items": 3, "kept_out_of_quartets": 3, "by_knowledge": None, "per_pool": {}}


def test_no_invented_rows_no_invented_stats(rows):
    rows, real_ids, _ = rows
    _, stats = _mine([r for r in rows if r["item_id"] in real_ids], set(real_ids), KnowledgeConfig(enabled=True, k=1))
    assert "invented" not in stats
