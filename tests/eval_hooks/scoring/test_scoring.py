"""``eval_hooks/scoring/``: the report kit's formatting, the requests and responses of a family's run, and the one
atomic publish of an evaluation's files (the entry points' end-to-end tests are in tests/eval_hooks/test_evaluate.py
and test_eval_keeps_work.py)."""

from __future__ import annotations

import json

import pytest

from eval_hooks.scoring.publish import publish_outputs
from eval_hooks.scoring.report_kit import ci_text, md_table, pct, pp, with_ci
from eval_hooks.scoring.responses import build_requests, check_responses, generation_warnings
from selectrust.core.errors import DataError
from selectrust.generation.response_log import RESPONSES_FILE


def test_report_kit_formats_rates_differences_intervals_and_tables():
    assert (pct(0.125), pct(None), pct(0.5, digits=0)) == ("12.5%", "–", "50%")
    assert (pp(0.031), pp(-0.2), pp(None)) == ("+3.1 pp", "-20.0 pp", "–")
    assert (ci_text([0.1, 0.25]), ci_text(None)) == ("[10.0, 25.0]", "–")
    assert with_ci({"value": 0.5, "ci": [0.4, 0.6]}) == "50.0% [40.0%, 60.0%]"
    assert with_ci({"value": 0.5}) == "50.0%"
    assert md_table(["a", "b"], [[1, "x"], [2, "y"]]) == "| a | b |\n|---|---|\n| 1 | x |\n| 2 | y |"


def test_one_request_per_row_with_the_settings():
    reqs = build_requests([{"prompt": "Q1"}, {"prompt": "Q2"}], max_new_tokens=7, stop=["\n"], seed=3)
    assert [r.max_new_tokens for r in reqs] == [7, 7] and reqs[0].stop == ["\n"] and reqs[1].seed == 3
    assert reqs[0].messages[-1] == {"role": "user", "content": "Q1"}


def test_generation_warnings_count_null_content_and_length_finishes():
    finishes = {"a": {"finish_reason": "stop"}, "b": {"finish_reason": "length"},
                "c": {"finish_reason": "stop", "null_content": True}}
    counts, warnings = generation_warnings(finishes, max_new_tokens=16)
    assert counts == {"n_null_content": 1, "n_finish_length": 1}
    assert len(warnings) == 2 and "1 of 3 rows" in warnings[0] and "max_new_tokens=16" in warnings[1]
    assert generation_warnings({"a": {"finish_reason": "stop"}}) == ({"n_null_content": 0, "n_finish_length": 0}, [])


@pytest.mark.parametrize("rows, responses, match", [
    ([{"row_id": "a"}, {"row_id": "a"}], {"a": "x"}, "duplicate row_id 'a'"),
    ([{"row_id": "a"}], {"a": "x", "z": "y"}, "unknown row ids"),
    ([{"row_id": "a"}, {"row_id": "b"}], {"a": "x"}, "no response for 1 of 2 rows"),
])
def test_check_responses_wants_exactly_one_response_per_row(rows, responses, match):
    with pytest.raises(DataError, match=match):
        check_responses(rows, responses, "responses.jsonl")
    check_responses([{"row_id": "a"}], {"a": "x"}, None)


def test_publish_writes_all_or_nothing_and_keeps_the_saved_responses(tmp_path):
    out = tmp_path / "eval"
    out.mkdir()
    (out / RESPONSES_FILE).write_text('{"row_id": "a"}\n')

    def report(d):
        (d / "report.md").write_text("# report\n")

    publish_outputs(out, [{"row_id": "a", "correct": True}], {"n": 1}, report)
    assert json.loads((out / "metrics.json").read_text()) == {"n": 1}
    assert (out / "report.md").read_text() == "# report\n" and (out / RESPONSES_FILE).is_file()
    assert [json.loads(x) for x in (out / "item_scores.jsonl").read_text().splitlines()] == [{"row_id": "a",
                                                                                           "correct": True}]

    def broken(d):
        raise RuntimeError("plot failed")

    with pytest.raises(RuntimeError, match="plot failed"):
        publish_outputs(out, [], {"n": 2}, broken)
    assert json.loads((out / "metrics.json").read_text()) == {"n": 1}  # the earlier output, intact
    assert sorted(p.name for p in tmp_path.iterdir()) == ["eval"]  # no temporary directory left behind
