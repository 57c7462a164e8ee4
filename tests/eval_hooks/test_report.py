"""report.md + PNGs for every family, and the before/after comparison table."""

import json

import pytest

from eval_hooks import compute_metrics
from eval_hooks.report import compare_table, write_report
from tests.eval_hooks.metrics.test_metrics import HAND, box2_rows, format_rows, mist_rows, taste_hand_rows

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def med_rows():
    rows = []
    for j, (cat, var, parsed) in enumerate([("original", "evd", "Higher"), ("original", "evd", "Lower"),
                                             ("toxic", "skept_evd", "Uncertain"), ("toxic", "evd", "Higher")]):
        rows.append({"row_id": f"r{j}", "item_id": f"i{j}", "condition": f"{cat}/{var}", "gold": "Higher",
                     "parsed": parsed, "parse_ok": True, "correct": parsed == "Higher"})
    return rows


CASES = {
    "mist": (lambda: mist_rows(HAND, {0: {"misleading": {"channel": "answer_key", "wrong_value": "9"}},
                                      3: {"misleading": {"channel": "snippet"}}}),
             ["mist_accuracy.png"], ["65.0%", "66.7%", "| clean | 60.0% |", "Slices by `channel`", "`q0`"]),
    "box2": (lambda: box2_rows({"none": [1, 1, 0, 0], "good": [1, 1, 1, 0], "bad": [0, 0, 0, 1],
                                "partial_2": [1, 1], "partial_4": [1, 0, 0, 0], "mixed_2": [0, 0], "mixed_4": [1, 0, 1, 0]}),
             ["box2_scores.png", "box2_recovery.png"], ["+25.0 pp", "-37.5 pp", "| 4 | 25.0% | 50.0% |"]),
    "taste": (taste_hand_rows, ["taste_paired_outcomes.png", "taste_cells.png"],
              ["**33.3%**", "CC 2", "WW 1", "### Per cell", "### Per horizon"]),
    "med": (med_rows, ["med_rates.png"], ["### EA rate", "| original | 50.0% |", "| toxic | 100.0% | 0.0% |"]),
}


@pytest.mark.parametrize("family", list(CASES))
def test_write_report_tables_and_plots(tmp_path, family):
    make_rows, pngs, snippets = CASES[family]
    rows = make_rows()
    # the report must work from metrics.json as read back from disk (string keys, lists for CIs)
    metrics = json.loads(json.dumps(compute_metrics(family, rows, n_boot=100)))
    path = write_report(family, metrics, rows, tmp_path / "out", title=f"{family} test run")
    assert path == tmp_path / "out" / "report.md"
    text = path.read_text()
    assert text.startswith(f"# {family} test run")
    for png in pngs:
        assert f"![{png}]({png})" in text
        data = (tmp_path / "out" / png).read_bytes()
        assert data[:8] == PNG_MAGIC and len(data) > 5000, png
    for s in snippets:
        assert s in text, (s, text)


def test_mist_report_without_ci_and_with_undefined_sc2w(tmp_path):
    rows = mist_rows([[0, 0, 1, 1], [0, 1, 1, 0]])
    metrics = compute_metrics("mist", rows, n_boot=0)
    text = write_report("mist", metrics, rows, tmp_path).read_text()
    assert "| **SC2W** (lower is better) | – | – |" in text
    assert "No bootstrap CIs" in text


def test_write_report_rejects_unknown_family(tmp_path):
    with pytest.raises(ValueError, match="unknown family 'gsm'"):
        write_report("gsm", {}, [], tmp_path)


def test_compare_table_two_runs_has_deltas():
    """base: HAND (Overall 65%, SC2W 2/3); trained: q0 and q3 fixed under misleading -> misleading
    4/5, Overall (0.6+0.8+0.8+0.8)/4 = 75%, SC2W 0/3. Δ = +10.0 pp and -66.7 pp."""
    trained = [[1, 1, 1, 1], [1, 1, 1, 1], [0, 0, 1, 0], [1, 1, 0, 1], [0, 1, 1, 1]]
    table = compare_table({"base": compute_metrics("mist", mist_rows(HAND), n_boot=0),
                           "SCOPE": compute_metrics("mist", mist_rows(trained), n_boot=0)}, "mist")
    lines = table.splitlines()
    assert lines[0] == "| metric | base | SCOPE | Δ |"
    assert "| `overall` | 65.0% | 75.0% | +10.0 pp |" in lines
    assert "| `sc2w` | 66.7% | 0.0% | -66.7 pp |" in lines
    assert "| `accuracy.misleading` | 40.0% | 80.0% | +40.0 pp |" in lines


def test_compare_table_counts_effects_and_three_runs():
    m = compute_metrics("taste", taste_hand_rows())
    two = compare_table({"a": m, "b": m}, "taste")
    assert "| `paired_outcomes.CC` | 2 | 2 | +0 |" in two
    b = compute_metrics("box2", box2_rows({"none": [1, 1, 0, 0], "bad": [0, 0, 0, 1]}))
    three = compare_table({"x": b, "y": b, "z": b}, "box2")
    assert three.splitlines()[0] == "| metric | x | y | z |"
    assert "| `delta.bad` | -25.0 pp | -25.0 pp | -25.0 pp |" in three
    assert "| `score.good` | – | – | – |" in three
    with pytest.raises(ValueError):
        compare_table({}, "box2")


def test_mist_report_splits_unparsed_into_no_answer_and_outside_candidates(tmp_path):
    rows = format_rows()
    metrics = compute_metrics("mist", rows, n_boot=0)
    text = write_report("mist", metrics, rows, tmp_path).read_text()
    assert ("| condition | accuracy | 95% CI | unparsed | no answer | hedged | multiple | outside candidates | "
            "format compliance |" in text)
    assert "| misleading | " in text and " | 1 | 1 | 0 | 0 | 1 | 80.0% |" in text
    assert " | 0 | 0 | 0 | 0 | 1 | 100.0% |" in text  # clean: one answer outside the candidates, full compliance


def test_mist_report_shows_hedged_rows_apart(tmp_path):
    """A hedge ("Either Sofia or Plovdiv.") is unparsed and not compliant, but is its own column, not "no answer"."""
    rows = format_rows()
    for r in rows:
        if (r["item_id"], r["condition"]) == ("q1", "correct"):
            r.update(parsed=None, parse_ok=False, correct=False, answer_status="hedged")
    metrics = compute_metrics("mist", rows, n_boot=0)
    text = write_report("mist", metrics, rows, tmp_path).read_text()
    assert "| hedged |" in text and "| correct | " in text and " | 1 | 0 | 1 | 0 | 0 | 80.0% |" in text


def test_mist_report_shows_multiple_rows_beside_hedged(tmp_path):
    """A list of names ("Sofia and Plovdiv.") is counted in its own column beside hedged and no answer, in the
    condition's row and the overall total (metrics.json's ``multiple.<condition>``)."""
    rows = format_rows()
    for r in rows:
        if r["item_id"] == "q1" and r["condition"] in ("correct", "irrelevant"):
            r.update(parsed=None, parse_ok=False, correct=False, answer_status="multiple")
    metrics = compute_metrics("mist", rows, n_boot=0)
    assert metrics["multiple"]["correct"] == 1 and metrics["multiple"]["irrelevant"] == 1
    text = write_report("mist", metrics, rows, tmp_path).read_text()
    assert "| hedged | multiple | outside candidates |" in text and "*multiple*" in text
    line = next(x for x in text.splitlines() if x.startswith("| correct |"))
    assert line.endswith(" | 1 | 0 | 0 | 1 | 0 | 80.0% |"), line
    overall = next(x for x in text.splitlines() if x.startswith("| **Overall** |"))
    assert overall.split(" | ")[6] == "2", overall
