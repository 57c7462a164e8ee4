import math

import pytest

from selectrust.core.errors import ConfigError
from trainer.rl.rewards import REGISTRY, GuardedReward, RewardError, resolve_reward


def test_registry_scores_outcome_only():
    num = REGISTRY["numeric_match"]
    row = {"gold": 204, "answer_type": "numeric"}
    assert num("so 12*17 = 204\nANSWER: 204", row) == 1.0
    assert num("ANSWER: 1,000", {"gold": 1000, "answer_type": "numeric"}) == 1.0
    # the last final answer wins: the workflow's number mentioned earlier does not count
    assert num("the workflow says 240. ANSWER: 204", row) == 1.0
    assert num("the workflow says 204. ANSWER: 240", row) == 0.0
    assert num("no number here", row) == 0.0
    mc = REGISTRY["multiple_choice"]
    assert mc("ANSWER: B", {"gold": "B", "answer_type": "multiple_choice", "choices": ["x", "y"]}) == 1.0
    assert mc("ANSWER: A", {"gold": "B", "answer_type": "multiple_choice", "choices": ["x", "y"]}) == 0.0
    b = REGISTRY["boolean"]
    assert b("ANSWER: yes", {"gold": True, "answer_type": "boolean"}) == 1.0
    assert b("ANSWER: no", {"gold": True, "answer_type": "boolean"}) == 0.0
    assert REGISTRY["answer_match"]("ANSWER: no", {"gold": "false", "answer_type": "boolean"}) == 1.0


def test_answer_match_judges_a_short_text_row_as_evaluation_does():
    """The facts set's rows: the answer sits in a sentence and may be a gold alias (as the evaluation parser reads
    it); the wrong value is not the gold."""
    from eval_hooks.parsers import parse_row_answer, row_answer_matches

    row = {"gold": "Asia", "gold_aliases": ["Asian"], "wrong_value": "Africa", "answer_type": "short_text"}
    fn = REGISTRY["answer_match"]
    for text, right in (("It is an Asian country.", True), ("Asia.", True), ("It lies in Africa.", False),
                        ("The continent of Peru is Asia.", True), ("I am not sure.", False)):
        assert fn(text, row) == float(right), text
        assert row_answer_matches(parse_row_answer(text, row), row) is right, text


def test_answer_match_gives_nothing_for_every_candidate_on_its_own_line():
    """Issue 51: the reward reads a response as the evaluation judge does (claims, eval_hooks/FORMATS.md), so a list
    of every candidate, one a line, bulleted or numbered, is ``multiple`` and earns 0; the gold alone earns 1; the
    answer with a side clause about another property still earns 1."""
    row = {"gold": "Canberra", "wrong_value": "Sydney", "answer_type": "short_text", "item_id": "au"}
    fn = REGISTRY["answer_match"]
    for text in ("Canberra\nSydney", "Sydney\nCanberra", "- Canberra\n- Sydney", "* Sydney\n* Canberra",
                 "1. Canberra\n2. Sydney", "Canberra\n\nSydney\n"):
        assert fn(text, row) == 0.0, text
    for text in ("Canberra", "- Canberra", "The largest city is Sydney, but the capital is Canberra."):
        assert fn(text, row) == 1.0, text


def test_resolve_names_and_import_paths():
    assert resolve_reward("numeric_match") is REGISTRY["numeric_match"]
    fn = resolve_reward("tests.box2_fakes:distinct_chars_parity")
    assert fn("aab", {}) == 0.0 and fn("abc", {}) == 1.0
    with pytest.raises(ConfigError, match="numeric_macth.*not a registered reward.*numeric_match"):
        resolve_reward("numeric_macth")
    with pytest.raises(ConfigError, match="cannot import module 'no_such_pkg_x.mod'"):
        resolve_reward("no_such_pkg_x.mod:f")
    with pytest.raises(ConfigError, match="has no callable 'nope'"):
        resolve_reward("tests.box2_fakes:nope")


def test_guard_scores_errors_as_zero_and_counts_them():
    calls = iter([1.0, float("nan"), "x", 0.5, float("inf")])

    def flaky(completion, row):
        v = next(calls)
        if v == "x":
            raise KeyError("gold")
        return v

    g = GuardedReward(flaky, name="flaky", max_errors=10)
    out = [g("c", {"item_id": str(i)}) for i in range(5)]
    assert out == [(1.0, True), (0.0, False), (0.0, False), (0.5, True), (0.0, False)]
    assert g.errors_total == 3 and g.pop_errors() == 3 and g.pop_errors() == 0
    assert "non-finite" in g.example["problem"] and g.example["item_id"] == "1"
    g.load_state_dict({"errors_total": 7})
    assert g.errors_total == 7


def test_guard_stops_the_run_naming_function_and_input():
    g = GuardedReward(resolve_reward("tests.box2_fakes:always_raises"), max_errors=2)
    assert g("first completion", {"item_id": "a", "gold": 3, "answer_type": "numeric"}) == (0.0, False)
    with pytest.raises(RewardError) as e:
        g("second", {"item_id": "b"})
    msg = str(e.value)
    assert "tests.box2_fakes:always_raises" in msg and "ZeroDivisionError: boom" in msg
    assert "'first completion'" in msg and "item_id='a'" in msg and "gold=3" in msg


def test_registry_values_are_finite_floats():
    for name, fn in REGISTRY.items():
        v = fn("ANSWER: 1", {"gold": 1, "answer_type": "numeric"} if name != "multiple_choice" and name != "boolean"
               else {"gold": "A" if name == "multiple_choice" else True, "answer_type": name, "choices": ["a", "b"]})
        assert isinstance(v, float) and math.isfinite(v)
