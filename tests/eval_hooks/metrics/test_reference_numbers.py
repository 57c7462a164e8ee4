"""Published numbers reproduced through ``compute_metrics`` (docs/scope.md#reference-numbers,
docs/box2.md#reference-numbers, docs/taste.md#reference-numbers).

Item-level results are not published, so each test builds synthetic item scores that realise the
published counts (gold letters and parsed choices for Taste, correctness matrices for MIST, counts
out of 30 for Box2) and checks that the metrics code turns them into the published figures.
"""

import json

import pytest

from eval_hooks import compute_metrics
from selectrust.conditions import MIST_CONDITIONS

# ---------------------------------------------------------------------------------------------
# Taste-Bench, gpt-5.6-sol summary
# ---------------------------------------------------------------------------------------------

OTHER = {"A": "B", "B": "A"}


def label_split(outcomes, choices):
    """How many items of each paired outcome have stored label A, so that the position-choice
    counts come out as published. With x_o items of outcome o labelled A (seeded gold = label,
    reversed gold = the other letter; a correct answer picks the gold, a wrong one the other):

        seeded_A   = x_CC + x_CW + (n_WC - x_WC) + (n_WW - x_WW)
        reversed_A = (n_CC - x_CC) + x_CW + (n_WC - x_WC) + x_WW

    Returns the first non-negative integer solution, or None if the counts are inconsistent."""
    n = outcomes
    for x_cw in range(n["CW"] + 1):
        for x_wc in range(n["WC"] + 1):
            p = choices["seeded_A"] - x_cw - (n["WC"] - x_wc) - n["WW"]  # = x_CC - x_WW
            q = choices["reversed_A"] - n["CC"] - x_cw - (n["WC"] - x_wc)  # = x_WW - x_CC
            if p != -q:
                continue
            for x_cc in range(n["CC"] + 1):
                x_ww = x_cc - p
                if 0 <= x_ww <= n["WW"]:
                    return {"CC": x_cc, "CW": x_cw, "WC": x_wc, "WW": x_ww}
    return None


def taste_rows_for_cell(cell, stats):
    construction, domain = cell.split("_")
    split = label_split(stats["paired_outcomes"], stats["position_choices"])
    assert split is not None, f"{cell}: published counts admit no assignment of labels"
    rows = []
    for outcome, count in stats["paired_outcomes"].items():
        for j in range(count):
            item_id = f"{cell}/{outcome}/{j}"
            label = "A" if j < split[outcome] else "B"
            for cond, gold, ok in (("seeded", label, outcome[0] == "C"), ("reversed", OTHER[label], outcome[1] == "C")):
                choice = gold if ok else OTHER[gold]
                rows.append({"row_id": f"{item_id}/{cond}", "item_id": item_id, "condition": cond, "gold": gold,
                             "answer_type": "choice", "construction": construction, "domain": domain,
                             "horizon": None, "response": f"ANSWER: {choice}", "parsed": choice, "choice": choice,
                             "parse_ok": True, "correct": choice == gold})
    return rows


@pytest.fixture(scope="module")
def taste_reference(reference_dir):
    summary = json.loads((reference_dir / "tastebench_gpt-5.6-sol_summary.json").read_text())
    rows = [r for cell, stats in summary["per_cell"].items() for r in taste_rows_for_cell(cell, stats)]
    return summary, compute_metrics("taste", rows)


def test_taste_headline_numbers(taste_reference):
    summary, m = taste_reference
    overall = summary["overall"]
    assert m["n_items"] == summary["n_items"] == 502
    assert m["strict"] == pytest.approx(0.581673, abs=5e-7)
    assert m["mean"] == pytest.approx(0.635458, abs=5e-7)
    assert round(m["average"], 4) == 0.5971 == summary["headline_average_expected"]
    assert m["strict"] == pytest.approx(overall["both_correct_rate"], abs=5e-7)
    assert m["mean"] == pytest.approx(overall["two_order_mean_accuracy"], abs=5e-7)
    assert m["seeded"] == pytest.approx(overall["seeded"]["accuracy"], abs=5e-7)
    assert m["reversed"] == pytest.approx(overall["reversed"]["accuracy"], abs=5e-7)
    assert m["seeded_correct"] == overall["seeded"]["correct"]
    assert m["reversed_correct"] == overall["reversed"]["correct"]
    assert m["paired_outcomes"] == overall["paired_outcomes"] == {"CC": 292, "CW": 25, "WC": 29, "WW": 156}
    assert m["position_choices"] == overall["position_choices"]
    assert m["unparsed"] == {"seeded": overall["seeded"]["unparsed"], "reversed": overall["reversed"]["unparsed"]}


def test_taste_every_per_cell_figure(taste_reference):
    summary, m = taste_reference
    assert sorted(m["per_cell"]) == sorted(summary["per_cell"])
    for cell, ref in summary["per_cell"].items():
        got = m["per_cell"][cell]
        assert got["n"] == ref["n"], cell
        assert got["seeded_correct"] == ref["seeded_correct"], cell
        assert got["reversed_correct"] == ref["reversed_correct"], cell
        assert got["seeded"] == pytest.approx(ref["seeded_correct"] / ref["n"]), cell
        assert got["mean"] == pytest.approx(ref["two_order_mean_accuracy"], abs=5e-7), cell
        assert round(got["strict"] * ref["n"]) == ref["both_correct"], cell
        assert got["strict"] == pytest.approx(ref["both_correct_rate"], abs=5e-7), cell
        assert got["paired_outcomes"] == ref["paired_outcomes"], cell
        assert got["position_choices"] == ref["position_choices"], cell


def test_taste_average_is_domain_weighted_not_pooled(taste_reference):
    """engineering strict = (128 + 94) / (266 + 124), research = (43 + 27) / (64 + 48); the headline
    is their plain mean, which differs from the pooled strict 292/502."""
    _, m = taste_reference
    assert m["per_domain"]["engineering"]["strict"] == pytest.approx(222 / 390)
    assert m["per_domain"]["research"]["strict"] == pytest.approx(70 / 112)
    assert m["average"] == pytest.approx((222 / 390 + 70 / 112) / 2)
    assert abs(m["average"] - m["strict"]) > 0.01


# ---------------------------------------------------------------------------------------------
# SCOPE leaderboard (MIST-1000, 35 rows)
# ---------------------------------------------------------------------------------------------

N_MIST = 1000


def leaderboard_rows(reference_dir):
    data = json.loads((reference_dir / "scope_leaderboard.json").read_text())
    assert len(data["rows"]) == 35
    return data["rows"]


def realise(row):
    """1000 items whose condition accuracies are the row's (percentages with one decimal, so exact
    counts out of 1000) and, where an integer count exists, whose SC2W rounds to the row's ``sc``.
    Returns (item scores, n_fail) with n_fail None when no count reproduces ``sc``."""
    counts = {c: round(row[k] * N_MIST / 100) for c, k in zip(MIST_CONDITIONS, ("clean", "mis", "cor", "irr"))}
    n_clean, n_mis = counts["clean"], counts["misleading"]
    # n_fail = clean-correct & mis-wrong; feasible iff n_clean - n_mis <= n_fail <= N - n_mis.
    feasible = [n for n in range(max(0, n_clean - n_mis), min(n_clean, N_MIST - n_mis) + 1)
                if abs(100 * n / n_clean - row["sc"]) <= 0.05 + 1e-9]
    n_fail = feasible[0] if feasible else max(0, n_clean - n_mis)
    # items in blocks: both right | clean only (failures) | misleading only | neither
    both = n_clean - n_fail
    clean_col = [i < n_clean for i in range(N_MIST)]
    mis_col = [i < both or n_clean <= i < n_clean + (n_mis - both) for i in range(N_MIST)]
    cols = {"clean": clean_col, "misleading": mis_col,
            "correct": [i < counts["correct"] for i in range(N_MIST)],
            "irrelevant": [i >= N_MIST - counts["irrelevant"] for i in range(N_MIST)]}
    scores = [{"row_id": f"i{i}/{c}", "item_id": f"i{i}", "condition": c, "gold": "1", "parse_ok": True,
               "correct": cols[c][i]} for i in range(N_MIST) for c in MIST_CONDITIONS]
    return scores, (n_fail if feasible else None)


def test_scope_leaderboard_overall_is_mean_of_four(reference_dir):
    """For all 35 rows: accuracies exact, Overall within rounding of the published ``ov`` (the inputs
    are themselves rounded to 0.1 pp, so |mean - ov| <= 0.05 pp plus float slack)."""
    unrealisable_sc = []
    for row in leaderboard_rows(reference_dir):
        scores, n_fail = realise(row)
        m = compute_metrics("mist", scores, n_boot=0)
        name = f"{row.get('base', '')} {row['name']}".strip()
        for c, k in zip(MIST_CONDITIONS, ("clean", "mis", "cor", "irr")):
            assert 100 * m["accuracy"][c] == pytest.approx(row[k], abs=1e-9), (name, c)
        assert abs(100 * m["overall"] - row["ov"]) <= 0.051, name
        if n_fail is None:
            unrealisable_sc.append(name)
        else:
            assert abs(100 * m["sc2w"] - row["sc"]) <= 0.05 + 1e-9, name
    # Published inconsistency: Qwen3-4B + SFT has clean 93.4 (934 items) and SC2W 17.4, but
    # 162/934 = 17.34 and 163/934 = 17.45: no count of failures rounds to 17.4.
    assert unrealisable_sc == ["Qwen3-4B + SFT"]


def test_scope_base_failures_match_the_papers_repair_count(reference_dir):
    """Qwen3-4B: clean 94.5, SC2W 35.0 -> the only count is 331 failures, the number the paper's
    repair analysis starts from ("repaired 188 of 331")."""
    row = next(r for r in leaderboard_rows(reference_dir) if r["name"] == "Qwen3-4B")
    scores, n_fail = realise(row)
    assert n_fail == 331
    m = compute_metrics("mist", scores, n_boot=0)
    assert m["n_clean_correct"] == 945 and round(m["sc2w"] * 945) == 331


# ---------------------------------------------------------------------------------------------
# Box2: OpenR1-Math, Gemini 3.7 Flash (counts out of 30)
# ---------------------------------------------------------------------------------------------


def test_box2_effects_from_counts_are_unrounded():
    """S_0 = 23/30, S_G = 25/30, S_B = 10/30: Δuse = 2/30 = +0.0667, Δbad = -13/30 = -0.4333
    (subtracting the rounded 76.7 and 33.3 would give -43.4)."""
    rows = []
    for cond, n_ok in (("none", 23), ("good", 25), ("bad", 10)):
        rows += [{"row_id": f"p{j}/{cond}", "item_id": f"p{j}", "condition": cond, "regime": cond, "k": None,
                  "parse_ok": True, "correct": j < n_ok} for j in range(30)]
    m = compute_metrics("box2", rows)
    assert round(100 * m["score"]["none"], 1) == 76.7 and round(100 * m["score"]["bad"], 1) == 33.3
    assert round(m["delta"]["use"], 4) == 0.0667
    assert round(m["delta"]["bad"], 4) == -0.4333
    assert round(100 * m["delta"]["bad"], 1) == -43.3
    assert m["delta"]["bad"] == pytest.approx(-13 / 30)
