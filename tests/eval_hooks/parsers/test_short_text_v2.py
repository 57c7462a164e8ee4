"""The short_text commitment, second version (issue 42 #1, #2, #18; eval_hooks/FORMATS.md): lists and "X and Y"
are ``multiple``, an answer taken back commits to the last one, the clause naming the relation wins, "was ... until
...; today it is ..." reads the present, a refusal naming a name is no answer. Each case of
tests/data/short_text_adversarial_v2.jsonl is scored through MIST's own ``score_row`` and through the GRPO reward."""

import importlib.util
import json
from pathlib import Path

import pytest

from eval_hooks.families import get_family
from trainer.rl.rewards import answer_match

DATA = Path(__file__).parents[2] / "data" / "short_text_adversarial_v2.jsonl"
ROWS = [json.loads(line) for line in DATA.read_text(encoding="utf-8").splitlines() if line.strip()]


def test_the_table_has_every_form():
    assert len(ROWS) >= 60 and len({r["id"] for r in ROWS}) == len(ROWS)
    forms = {r["form"].split("_")[0] for r in ROWS}
    assert forms >= {"multiple", "takeback", "clause", "temporal", "refusal", "control"}
    assert sum(r["old_judge_wrong"] for r in ROWS) >= 50


def _row(r: dict) -> dict:
    """The case as a MIST row; ``relation``, ``subject`` and ``question`` (when the case has them) give the judge the
    relation's answer space (eval_hooks/parsers/answer_space.py)."""
    return {"row_id": r["id"], "item_id": r["id"], "condition": "clean", "answer_type": "short_text",
            "gold": r["gold"], "wrong_value": r["wrong_value"], "gold_aliases": r.get("gold_aliases"),
            **{k: r[k] for k in ("relation", "subject", "question") if k in r}}


@pytest.mark.parametrize("r", ROWS, ids=[r["id"] for r in ROWS])
def test_short_text_v2_case(r):
    if r.get("needs") and importlib.util.find_spec(r["needs"]) is None:
        pytest.skip(f"the answer space of relation {r['relation']!r} comes from {r['needs']} (not installed)")
    out = get_family("mist").score_row(_row(r), r["response"])
    got = (out["parsed"], "correct" if out["correct"] else "wrong", out["answer_status"])
    assert got == (r["parsed"], r["verdict"], r["status"]), r["response"]
    assert answer_match(r["response"], _row(r)) == (1.0 if r["verdict"] == "correct" else 0.0)


def test_multiple_is_counted_apart_like_hedged():
    from eval_hooks.families.mist.metrics import answer_format

    rows = [{"condition": "clean", "answer_status": s, "parse_ok": s == "candidate"}
            for s in ("multiple", "multiple", "hedged", "no_answer", "candidate")]
    out = answer_format(rows)
    assert (out["multiple"]["clean"], out["hedged"]["clean"], out["no_answer"]["clean"]) == (2, 1, 1)
    assert out["format_compliance"]["clean"] == pytest.approx(0.2)


def test_rescore_prints_changed_verdicts(tmp_path, capsys):
    from demos.real.rescore import main

    stage = tmp_path / "stages" / "eval_base"
    stage.mkdir(parents=True)
    (stage / "stage_complete.json").write_text("{}")
    rows = [{"row_id": f"r{i}/clean", "item_id": f"r{i}", "condition": "clean", "answer_type": "short_text",
             "gold": "Abu Dhabi", "wrong_value": "Dubai", "response": text, "parsed": "abu dhabi", "parse_ok": True,
             "correct": True, "answer_status": "candidate"} for i, text in enumerate(["Abu Dhabi and Dubai.", "Abu Dhabi."])]
    (stage / "item_scores.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert main([str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "r0/clean\tcorrect/candidate -> wrong/multiple" in out and "r1/clean" not in out
    assert "changed verdicts or statuses: 1" in out
    assert main([str(tmp_path / "nope")]) == 2


def test_answer_space_of_a_row():
    """The relation comes from the row's field, else from its question's predicate; continents are a closed set (the
    facts builder's six among them); the subject is never an answer."""
    from eval_hooks.builders.facts.relations import CONTINENTS
    from eval_hooks.parsers.answer_space import CONTINENT_NAMES, row_answer_space, row_relation

    assert set(CONTINENTS.values()) <= set(CONTINENT_NAMES)
    assert row_relation({"relation": "continent", "question": "What is the capital of Peru?"}) == "continent"
    assert [row_relation({"question": q}) for q in ("On which continent is Peru?", "What is the capital of Peru?",
            "In which country is the city of Lima?", "Lima is the capital of which country?",
            "What is the currency of Peru?")] == ["continent", "capital", "city_country", "city_country", None]
    space = row_answer_space({"relation": "continent", "subject": "Peru"})
    assert space.holds("south america") and not space.holds("peru") and not space.holds("lima")
    assert row_answer_space({"relation": "currency"}) is None and row_answer_space({}) is None


def test_a_plain_candidate_list_keeps_the_rule_without_a_space():
    """Called without a row (a list of candidates, no space), three names are still ``multiple``."""
    from eval_hooks.parsers import read_short_text

    assert read_short_text("Abobo, Ivory Coast, Africa.", [("Africa",), ("Europe",)]).status == "multiple"
    assert read_short_text("Africa and Asia.", [("Africa",), ("Europe",)]).answer == "africa"
