"""Workflow tools: leakage check, verifier hooks, build report, freezing, expansion via the Box2 family."""

import json

import pytest

from selectrust.core.io import DataError
from eval_hooks.builders.workflows import (build_workflow_items, counterfactual_sft_rows, expand_conditions, freeze_workflows,
                               leaked_answer, load_frozen, rl_prompt_rows, workflow_hash)

REC = {"item_id": "m1", "task": "What is 12*17?", "gold": 204, "answer_type": "numeric",
       "good_steps": ["multiply 12 by 10", "multiply 12 by 7", "add the two products"],
       "bad_steps": ["multiply 12 by 20", "subtract 12", "report the result"], "source": "t"}


def test_leak_check_finds_gold_value_in_any_notation():
    assert leaked_answer("so the total is 204", 204, "numeric")
    assert leaked_answer("total 204.0", 204, "numeric")
    assert leaked_answer("about 2,040 tenths", 2040, "numeric")
    assert leaked_answer("a quarter: 0.25", "1/4", "numeric")
    assert leaked_answer("multiply 12 by 17", 204, "numeric") is None
    assert leaked_answer("the answer is B", "B", "multiple_choice", ["cat", "dog"])
    assert leaked_answer("pick the dog", "B", "multiple_choice", ["cat", "dog"])
    assert leaked_answer("Both options are plausible", "B", "multiple_choice", ["cat", "dog"]) is None
    assert leaked_answer("answer: yes", True, "boolean") and leaked_answer("answer: no", True, "boolean") is None


def test_leak_check_is_the_answer_types_own_and_an_unknown_type_is_an_error():
    """``leaked_answer`` asks the answer-type registry: a registered type's ``leak`` is used, a type without one finds
    nothing, and an unknown type is a DataError naming it and the known ones (it used to pass silently as None)."""
    from eval_hooks import parsers
    from selectrust.core.errors import DataError

    assert leaked_answer("the answer is Paris", "Paris", "short_text") is None  # short_text has no leak check
    colour = parsers.AnswerType("colour", parse=lambda text, choices, cands: None,
                                normalize=lambda value, choices=None: value, accepted="a colour",
                                leak=lambda text, gold, choices: "says it" if gold in text else None)
    parsers.register_answer_type(colour)
    try:
        assert leaked_answer("paint it red", "red", "colour") == "says it"
        assert leaked_answer("paint it blue", "red", "colour") is None
    finally:
        parsers.unregister_answer_type("colour")
    with pytest.raises(DataError, match=r"unknown answer_type 'essay'; accepted: multiple_choice, .*short_text"):
        leaked_answer("204", 204, "essay")


def test_build_rejects_and_reports_leaks_and_verifier_failures():
    leaky = dict(REC, item_id="m2", bad_steps=["note 204 is wrong", "x", "y"])
    judged = dict(REC, item_id="m3")
    veto = lambda item, kind, steps: (item["item_id"] != "m3" or kind != "bad", "judge says implausible")
    items, rep = build_workflow_items([REC, leaky, judged], verifiers=[veto], change_points=[0, 2])
    assert [i["item_id"] for i in items] == ["m1"]
    assert rep.items_in == 3 and rep.items_kept == 1 and dict(rep.rejected) == {"leak": 1, "verifier": 1}
    assert rep.rejections[0] == {"item_id": "m2", "kind": "bad@0", "reason": "leak: bad step 1 states the gold value 204"}
    assert rep.rejections[1]["reason"] == "judge says implausible"
    assert items[0]["bad_continuations"] == {"0": REC["bad_steps"], "2": ["report the result"]}
    with pytest.raises(DataError, match="line 1, field 'bad_steps'"):
        build_workflow_items([{k: v for k, v in REC.items() if k != "bad_steps"}])


def test_expansion_is_the_box2_family_and_training_rows_use_the_bad_workflow(tmp_path):
    items, _ = build_workflow_items([REC])  # change points 0, 1, 2
    rows = expand_conditions(items)
    conds = {r["condition"]: r for r in rows}
    assert sorted(conds) == sorted(["none", "good", "bad", "partial_0", "partial_1", "partial_2", "mixed_0",
                                    "mixed_1", "mixed_2"])
    assert conds["mixed_1"]["workflow"] == ["multiply 12 by 10", "subtract 12", "report the result"]
    assert conds["partial_2"]["workflow"] == REC["good_steps"][:2]
    sft = counterfactual_sft_rows(items, {"m1": "12*17 = 204\nANSWER: 204"})
    assert sft[0]["messages"][0]["content"] == conds["bad"]["prompt"]
    assert "multiply 12 by 10" not in sft[0]["messages"][0]["content"]  # the good workflow is never trained on
    assert rl_prompt_rows(items)[0]["prompt"] == conds["bad"]["prompt"]


def test_freeze_and_tamper_detection(tmp_path):
    items, rep = build_workflow_items([REC])
    path = tmp_path / "wf.jsonl"
    manifest = freeze_workflows(items, path, report=rep)
    assert manifest["hashes"] == {"m1": workflow_hash(items[0])} and manifest["n_items"] == 1
    back = load_frozen(path)
    assert back[0]["workflow_hash"] == workflow_hash(items[0])
    assert expand_conditions(back)[0]["workflow_hash"] == back[0]["workflow_hash"]  # rows carry the hash
    rec = json.loads(path.read_text())
    rec["bad_continuations"]["0"][0] = "multiply 12 by 21"
    path.write_text(json.dumps(rec) + "\n")
    with pytest.raises(DataError, match="line 1.*'m1' changed after freezing"):
        load_frozen(path)
