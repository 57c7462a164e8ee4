"""GSM8K-style MIST quartet builder: deterministic, valid (loads through the MIST loader), matched."""

import json
from fractions import Fraction

import pytest

from eval_hooks import DataError, load_rows
from eval_hooks.builders.gsm8k import (CHANNELS, build_file, build_quartets, extract_gold, intermediate_results,
                                       wrong_candidates)
from eval_hooks.parsers import parse_number

JANET = {"question": "Janet\u2019s ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes "
                     "muffins for her friends every day with four. She sells the remainder at the farmers' market "
                     "daily for $2 per fresh duck egg. How much in dollars does she make every day at the "
                     "farmers' market?",
         "answer": "Janet sells 16 - 3 - 4 = <<16-3-4=9>>9 duck eggs a day.\nShe makes 9 * 2 = $<<9*2=18>>18 every "
                   "day at the farmer\u2019s market.\n#### 18"}
ROBE = {"question": "A robe takes 2 bolts of blue fiber and half that much white fiber.  How many bolts in total "
                    "does it take?",
        "answer": "It takes 2/2=<<2/2=1>>1 bolt of white fiber\nSo the total amount of fabric is 2+1=<<2+1=3>>3 "
                  "bolts of fabric\n#### 3"}
PLAIN = {"question": "Tom is a baker. Every morning the bakery smells wonderful. How many loaves are 12 times 12?",
         "answer": "1,440"}


def recs(*rs):
    return list(enumerate(rs, start=1))


def test_gold_and_intermediates():
    assert extract_gold(JANET["answer"]).value == 18
    assert extract_gold("... #### 1,234").value == 1234 and extract_gold(-7).value == -7
    assert extract_gold("no gold here") is None
    assert [v for _, v in intermediate_results(JANET["answer"])] == [9, 18]


def test_wrong_candidates_by_hand():
    c = wrong_candidates(Fraction(18), JANET["answer"])
    assert [v for v, _ in c["intermediate"]] == [9]                 # 18 itself is the gold, excluded
    assert [v for v, _ in c["digit_swap"]] == [81]
    assert sorted(v for v, _ in c["pct10"]) == [16, 20]             # 16.2 and 19.8 rounded like an integer gold
    c = wrong_candidates(Fraction(3), ROBE["answer"])
    assert [v for v, _ in c["intermediate"]] == [1] and c["digit_swap"] == []
    assert c["pct10"] == []                                         # 3 +- 10% rounds back to 3
    c = wrong_candidates(Fraction(100), "")
    assert c["digit_swap"] == [] or all(v != 100 for v, _ in c["digit_swap"])
    assert all(v != 100 for vs in c.values() for v, _ in vs)


def test_quartets_are_matched_and_recorded():
    rows = build_quartets(recs(JANET, ROBE, PLAIN), seed=0)
    assert len(rows) == 12
    by = {(r["item_id"], r["condition"]): r for r in rows}
    janet = [by[("gsm8k-0", c)] for c in ("clean", "misleading", "correct", "irrelevant")]
    assert {r["gold"] for r in janet} == {"18"} and len({r["wrong_value"] for r in janet}) == 1
    clean, mis, cor, irr = janet
    assert clean["prompt"].startswith("Question: ") and clean["context"] is None and clean["channel"] == "none"
    assert mis["channel"] == cor["channel"] in CHANNELS
    # misleading and correct differ only in the number shown
    assert mis["prompt"].replace(mis["wrong_value"], "X", 1) == cor["prompt"].replace("18", "X", 1)
    assert mis["hint_value"] == mis["wrong_value"] != "18" and cor["hint_value"] == "18"
    assert mis["provenance"] != "gold" and cor["provenance"] == "gold"
    assert irr["channel"] == "other_item_sentence" and irr["provenance"] in ("gsm8k:1", "gsm8k:2")
    assert irr["context"] in ROBE["question"] + PLAIN["question"] and not irr["context"].endswith("?")
    assert not any(ch.isdigit() for ch in irr["context"])            # digit-free sentences exist here
    for r in janet:
        assert r["prompt"].endswith(clean["prompt"])                 # only the context differs
        assert r["source"] == "gsm8k" and r["source_id"] == "0" and r["plausibility"] == mis["plausibility"]
    assert by[("gsm8k-2", "clean")]["gold"] == "1440"


def test_deterministic_and_seed_dependent():
    data = recs(JANET, ROBE, PLAIN)
    assert build_quartets(data, seed=3) == build_quartets(data, seed=3)
    draws = {json.dumps(build_quartets(data, seed=s)) for s in range(8)}
    assert len(draws) > 1
    # an item's quartet does not depend on which other items are built
    one = build_quartets(data, seed=3, limit=1)
    assert one == build_quartets(data, seed=3)[:4]


def test_bad_source_records(tmp_path):
    with pytest.raises(DataError, match="no numeric gold") as ei:
        build_quartets(recs(JANET, {"question": "q?", "answer": "#### many"}), path="x.jsonl")
    assert ei.value.line == 2 and ei.value.field == "answer"
    with pytest.raises(DataError, match="missing or empty question"):
        build_quartets(recs({"answer": "#### 3"}))
    with pytest.raises(DataError, match="unknown channel"):
        build_quartets(recs(JANET, ROBE), channels=["oracle"])


def test_real_gsm8k_subset_builds_valid_mist(gsm8k_path, tmp_path):
    src = gsm8k_path
    out = tmp_path / "mist.jsonl"
    stats = build_file(src, out, seed=0, limit=60)
    assert stats["items"] == 60 and stats["rows"] == 240
    assert len(stats["channels"]) >= 4 and len(stats["plausibility"]) >= 2
    rows = load_rows("mist", out)                                     # passes every quartet check
    assert len(rows) == 240
    golds = [json.loads(l)["answer"].split("####")[-1].strip().replace(",", "") for l in open(src)][:60]
    for r in rows:
        assert parse_number(r["gold"]).value == int(golds[int(r["source_id"])])
        assert parse_number(r["wrong_value"]).value != parse_number(r["gold"]).value
    out2 = tmp_path / "mist2.jsonl"
    build_file(src, out2, seed=0, limit=60)
    assert out.read_bytes() == out2.read_bytes()
