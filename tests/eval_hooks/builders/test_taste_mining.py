"""Taste fork mining: trajectory validation, fork finding, code checks, judge filters, funnel."""

import json

import pytest

from eval_hooks.builders.taste_forks import (MiningSettings, leak_words_in, mine_forks, parallel_pairs,
                                             parse_generator_reply, shared_prefix_len, verify_quotes)
from eval_hooks.builders.trajectories import load_trajectories, normalize_ws
from selectrust.core.io import DataError
from tests.taste_fakes import FakeBackend, mining_corpus, traj


def write(tmp_path, recs, name="traj.jsonl"):
    p = tmp_path / name
    p.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return p


def mine(tmp_path, recs=None, **kw):
    ts = load_trajectories(write(tmp_path, mining_corpus() if recs is None else recs))
    gen = FakeBackend("generator")
    return mine_forks(ts, gen, [("j1", FakeBackend("j1")), ("j2", FakeBackend("j2"))], MiningSettings(**kw))


# -- trajectory format -----------------------------------------------------------------------------

GOOD = traj("t", "a", 1.0, [("user", "x"), ("assistant", "y")])


@pytest.mark.parametrize("mutate, field, problem", [
    (lambda r: r.update(task_id=""), "task_id", "non-empty task id"),
    (lambda r: r.pop("steps"), "steps", "missing steps"),
    (lambda r: r.update(steps=[]), "steps", "missing steps"),
    (lambda r: r["steps"][1].update(step_id=1), "steps[1].step_id", "duplicate step id 1"),
    (lambda r: r["steps"][0].update(step_id=5), "steps[1].step_id", "out of order"),
    (lambda r: r["steps"][1].update(step_id="2"), "steps[1].step_id", "expected an integer"),
    (lambda r: r["steps"][0].update(exit_code="1"), "steps[0].exit_code", "integer or null"),
    (lambda r: r.update(outcome="pass"), "outcome", "expected a number"),
    (lambda r: r.update(domain="biology"), "domain", "unknown value"),
])
def test_trajectory_errors_name_file_line_field(tmp_path, mutate, field, problem):
    bad = json.loads(json.dumps(GOOD))
    mutate(bad)
    p = write(tmp_path, [GOOD, bad])
    with pytest.raises(DataError) as e:
        load_trajectories(p)
    assert (e.value.path, e.value.line, e.value.field) == (str(p), 2, field)
    assert problem in str(e.value)


def test_repeated_attempt_is_an_error(tmp_path):
    with pytest.raises(DataError, match="repeats .*line 1") as e:
        load_trajectories(write(tmp_path, [GOOD, GOOD]))
    assert e.value.line == 2 and e.value.field == "attempt_id"


def test_task_defaults_to_first_step():
    from eval_hooks.builders.trajectories import parse_trajectory
    from eval_hooks.families.base import Ctx

    t = parse_trajectory(GOOD, Ctx(None, 1))
    assert t.task == "x" and t.domain is None and t.by_id[2].content == "y"


# -- fork finding and checks -------------------------------------------------------------------------

def test_shared_prefix_uses_whitespace_normalisation_and_exit_codes(tmp_path):
    a, b, c = load_trajectories(write(tmp_path, [
        traj("t", "a", 1, [("user", "go"), ("assistant", "read  the\nfile"), ("tool", "ok", 0), ("assistant", "X")]),
        traj("t", "b", 0, [("user", "go"), ("assistant", "read the file"), ("tool", "ok", 0), ("assistant", "Y")]),
        traj("t", "c", 0, [("user", "go"), ("assistant", "read the file"), ("tool", "ok", 1)])]))
    assert shared_prefix_len(a, b) == 3 and shared_prefix_len(a, c) == 2


def test_parallel_pairs_prefer_same_model_and_cap(tmp_path):
    recs = [traj("t", "s1", 1, [("u", "x")], model="m1"), traj("t", "f1", 0, [("u", "x")], model="m2"),
            traj("t", "f2", 0, [("u", "x")], model="m1"), traj("t", "s2", 1, [("u", "x")], model="m2")]
    ts = load_trajectories(write(tmp_path, recs))
    got = [(g.attempt_id, b.attempt_id) for g, b in parallel_pairs(ts, 1.0, 8)]
    assert got == [("s1", "f2"), ("s2", "f1"), ("s1", "f1"), ("s2", "f2")]
    assert [(g.attempt_id, b.attempt_id) for g, b in parallel_pairs(ts, 1.0, 1)] == [("s1", "f2")]


def test_leak_words_whole_words_any_case():
    assert leak_words_in(["Do it CORRECTLY.", "fine"], ["correctly", "better", "fixed"]) == ["correctly"]
    assert leak_words_in(["a betterment", "prefixed"], ["better", "fixed"]) == []


def test_verify_quotes_rules(tmp_path):
    (t,) = load_trajectories(write(tmp_path, [traj("t", "a", 1, [
        ("assistant", "try   plan A"), ("tool", "boom", 2), ("assistant", "switch to\nplan B"), ("tool", "all good", 0),
        ("tool", "Traceback: ValueError", 0)])]))
    import re

    pat = re.compile(MiningSettings().error_pattern)
    q = lambda c, f, s, e: {"choice": {"step": c[0], "text": c[1]}, "failure": {"step": f[0], "text": f[1]},  # noqa
                            "switch": {"step": s[0], "text": s[1]}, "success": {"step": e[0], "text": e[1]}}
    ok = q((1, "try plan A"), (2, "boom"), (3, "switch to plan B"), (4, "all good"))
    assert verify_quotes(t, ok, pat) == ""                       # passes only after whitespace normalisation
    assert normalize_ws("try   plan A") == "try plan A"
    assert verify_quotes(t, q((1, "try plan A"), (2, "bang"), (3, "switch"), (4, "all")), pat) == "quote_not_in_step"
    assert verify_quotes(t, q((1, "try"), (9, "boom"), (3, "switch"), (4, "all")), pat) == "cited_step_missing"
    assert verify_quotes(t, q((3, "switch"), (2, "boom"), (1, "try"), (4, "all")), pat) == "steps_out_of_order"
    assert verify_quotes(t, q((1, "try"), (4, "all good"), (4, "all"), (4, "all")), pat) == "no_failure_signal"
    # exit code 0 but an error pattern in the failure passage is a failure signal
    assert verify_quotes(t, q((1, "try"), (5, "Traceback"), (5, "Value"), (5, "Error")), pat) == ""


def test_parse_generator_reply_reasons():
    assert parse_generator_reply("no json", "parallel") == (None, "no_json_object")
    assert parse_generator_reply('{"verdict": "maybe"}', "parallel") == (None, "bad_verdict")
    assert parse_generator_reply('{"verdict": "accept", "candidate_success": "x"}', "parallel") == \
        (None, "missing_candidates")
    assert parse_generator_reply('{"verdict": "accept", "abandoned": "x", "correction": "y", "quotes": {}}',
                                 "detour") == (None, "missing_quotes")
    obj, why = parse_generator_reply('x {"a": 1} then ```{"verdict": "reject"}```', "detour")
    assert why == "" and obj["verdict"] == "reject"


# -- the whole funnel -------------------------------------------------------------------------------

def test_funnel_every_filter_keeps_and_drops(tmp_path):
    items, stats, cands = mine(tmp_path)
    # hand-worked from tests/taste_fakes.mining_corpus (see its markers)
    assert stats["funnel"] == {"considered": 22, "candidates": 13, "parsed": 12, "rubric": 11, "checks": 6,
                               "trivial": 5, "released": 4}
    assert stats["per_cell"]["parallel_engineering"] == {"considered": 6, "candidates": 5, "parsed": 4, "rubric": 3,
                                                         "checks": 2, "trivial": 1, "released": 1}
    assert stats["per_cell"]["parallel_research"] == {"considered": 2, "candidates": 2, "parsed": 2, "rubric": 2,
                                                      "checks": 2, "trivial": 2, "released": 1}
    assert stats["per_cell"]["detour_engineering"]["checks"] == 1
    assert stats["per_cell"]["detour_research"]["released"] == 1
    assert stats["dropped"] == {
        "candidates": {"no_divergence": 1, "no_failure_signal": 8}, "parsed": {"no_json_object": 1},
        "rubric": {"generator_rejected": 1},
        "checks": {"leak_word": 1, "quote_not_in_step": 1, "steps_out_of_order": 1, "no_failure_signal": 1,
                   "cited_step_missing": 1},
        "trivial": {"all_judges_pick_label": 1}, "released": {"judge_disagrees": 1}}
    assert sorted(i["item_id"] for i in items) == ["detour/D1/d", "detour/D6/d", "parallel/P1/s-vs-f",
                                                  "parallel/P6/s-vs-f"]
    # every candidate has a fate; nothing vanishes
    assert len(cands) == 22 and all(c["fate"] for c in cands)
    assert sum(c["fate"] == "released" for c in cands) == 4
    assert stats["judge_unparsed"]["trivial"] == {"j1": 4, "j2": 5}


def test_items_are_valid_taste_items_with_task_id_and_label(tmp_path):
    from eval_hooks.evaluate import load_rows

    items, _, _ = mine(tmp_path)
    by_id = {i["item_id"]: i for i in items}
    p1 = by_id["parallel/P1/s-vs-f"]
    right = "Copy the five fields into the config."
    assert p1["candidate_" + p1["label"].lower()] == right and p1["task_id"] == "P1"
    assert p1["prefix"] == ["user: Task P1: make the tests pass.", "assistant: Read  the\nfailing test."]
    assert p1["fork_step"] == 3
    d1 = by_id["detour/D1/d"]
    assert d1["candidate_" + d1["label"].lower()] == "Put the placeholder on the call path instead."
    assert d1["prefix"] == ["user: Task D1", "assistant: Inspect the helper module."] and d1["fork_step"] == 3
    assert {i["domain"] for i in items} == {"engineering", "research"}
    rows = load_rows("taste", write(tmp_path, items, "items.jsonl"))
    assert len(rows) == 8 and {r["task_id"] for r in rows} == {"P1", "P6", "D1", "D6"}


def test_label_slot_is_seeded(tmp_path):
    labels = {}
    for seed in range(8):
        items, _, _ = mine(tmp_path, seed=seed)
        labels[seed] = tuple(i["label"] for i in sorted(items, key=lambda i: i["item_id"]))
    again, _, _ = mine(tmp_path, seed=3)
    assert tuple(i["label"] for i in sorted(again, key=lambda i: i["item_id"])) == labels[3]
    assert len(set(labels.values())) > 1 and {l for v in labels.values() for l in v} == {"A", "B"}


def test_constructions_subset_and_bad_settings(tmp_path):
    _, stats, _ = mine(tmp_path, constructions=["parallel"])
    assert set(stats["per_cell"]) == {"parallel_engineering", "parallel_research"}
    with pytest.raises(ValueError, match="constructions"):
        mine(tmp_path, constructions=["zigzag"])
    with pytest.raises(ValueError, match="error_pattern"):
        mine(tmp_path, error_pattern="(")
