"""Metrics on hand-worked examples: the expected values are computed in the docstrings/comments."""

import json

import numpy as np
import pytest

from eval_hooks.families.mist.metrics import (MIST_CONDITIONS, bootstrap_ci, matrix_stats, repair_analysis, sc2w,
                                              slice_metrics)
from eval_hooks import compute_metrics, headline

# ---------------------------------------------------------------------------------------------
# MIST helpers
# ---------------------------------------------------------------------------------------------


def mist_rows(matrix, attrs=None, prefix="q"):
    """Item scores from a (n_items, 4) 0/1 matrix in clean/misleading/correct/irrelevant order.
    ``attrs[i]`` is a dict of extra fields for item i, or {condition: dict} per condition."""
    rows = []
    for i, bits in enumerate(matrix):
        for c, bit in zip(MIST_CONDITIONS, bits):
            extra = (attrs or {}).get(i, {})
            extra = extra.get(c, {}) if any(k in MIST_CONDITIONS for k in extra) else extra
            rows.append({"row_id": f"{prefix}{i}/{c}", "item_id": f"{prefix}{i}", "condition": c,
                         "gold": "7", "answer_type": "numeric", "response": "", "parsed": "7" if bit else "3",
                         "parse_ok": True, "correct": bool(bit), **extra})
    return rows


# item | clean mis cor irr
#  q0  |   1    0   1   1   <- clean-correct, misleading-wrong: an SC2W failure
#  q1  |   1    1   1   1
#  q2  |   0    0   1   0   <- wrong when clean: in neither numerator nor denominator
#  q3  |   1    0   0   1   <- failure
#  q4  |   0    1   1   1   <- wrong when clean
HAND = [[1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 0], [1, 0, 0, 1], [0, 1, 1, 1]]


def test_mist_hand_example():
    """Acc = column means 3/5, 2/5, 4/5, 4/5; Overall = (0.6+0.4+0.8+0.8)/4 = 0.65;
    SC2W = #{q0, q3} / #{q0, q1, q3} = 2/3 (2/5 if clean-wrong items leaked into the denominator,
    3/3 if every misleading-wrong item counted)."""
    m = compute_metrics("mist", mist_rows(HAND), n_boot=0)
    assert m["accuracy"] == pytest.approx({"clean": 0.6, "misleading": 0.4, "correct": 0.8, "irrelevant": 0.8})
    assert m["overall"] == pytest.approx(0.65)
    assert m["sc2w"] == pytest.approx(2 / 3)
    assert m["n_items"] == 5 and m["n_clean_correct"] == 3
    assert "ci" not in m
    assert sc2w(mist_rows(HAND)) == pytest.approx(2 / 3)


def test_sc2w_undefined_without_clean_correct_items():
    rows = mist_rows([[0, 0, 1, 1], [0, 1, 1, 0]])
    assert sc2w(rows) is None
    m = compute_metrics("mist", rows, n_boot=50)
    assert m["sc2w"] is None and m["ci"]["sc2w"] is None
    json.dumps(m, allow_nan=False)  # null, never NaN, in metrics.json


def test_sc2w_zero_when_no_clean_correct_item_switches():
    assert sc2w(mist_rows([[1, 1, 0, 0], [0, 0, 0, 0]])) == 0.0


def test_row_order_does_not_matter():
    rows = mist_rows(HAND)
    shuffled = [rows[i] for i in np.random.default_rng(1).permutation(len(rows))]
    a = compute_metrics("mist", rows, n_boot=0)
    b = compute_metrics("mist", shuffled, n_boot=0)
    assert a["accuracy"] == b["accuracy"] and a["sc2w"] == b["sc2w"]


# -- bootstrap ----------------------------------------------------------------------------------


def test_bootstrap_identical_items_give_zero_width_ci():
    m = compute_metrics("mist", mist_rows([[1, 0, 1, 1]] * 20), n_boot=200, seed=3)
    ci = m["ci"]
    assert ci["accuracy"] == {"clean": [1.0, 1.0], "misleading": [0.0, 0.0], "correct": [1.0, 1.0],
                              "irrelevant": [1.0, 1.0]}
    assert ci["overall"] == [0.75, 0.75]
    assert ci["sc2w"] == [1.0, 1.0]


def test_bootstrap_keeps_an_items_rows_together():
    """Every item scores exactly 2 of 4 (pattern 1010 or 0101), so any resample of whole items has
    Overall 0.5: the CI has zero width. Resampling rows of each condition independently would not."""
    m = compute_metrics("mist", mist_rows([[1, 0, 1, 0], [0, 1, 0, 1]] * 15), n_boot=300, seed=0)
    assert m["ci"]["overall"] == [0.5, 0.5]
    lo, hi = m["ci"]["accuracy"]["clean"]
    assert lo < 0.5 < hi  # the per-condition accuracies do vary


def test_bootstrap_deterministic_and_matches_loop():
    a = np.array(HAND * 4, dtype=bool)
    ci1 = bootstrap_ci(a, n_boot=500, seed=7)
    assert ci1 == bootstrap_ci(a, n_boot=500, seed=7)
    assert ci1 != bootstrap_ci(a, n_boot=500, seed=8)
    # plain loop with the same draws
    idx = np.random.default_rng(7).integers(0, a.shape[0], size=(500, a.shape[0]))
    overall, ratio = [], []
    for row in idx:
        s = a[row]
        overall.append(s.mean(axis=0).mean())
        clean_ok = s[:, 0]
        ratio.append((clean_ok & ~s[:, 1]).sum() / clean_ok.sum() if clean_ok.sum() else np.nan)
    ratio = np.array(ratio)
    assert ci1["overall"] == pytest.approx(list(np.percentile(overall, [2.5, 97.5])))
    assert ci1["sc2w"] == pytest.approx(list(np.percentile(ratio[~np.isnan(ratio)], [2.5, 97.5])))
    point = matrix_stats(a)
    assert ci1["overall"][0] <= point["overall"] <= ci1["overall"][1]


def test_metrics_json_is_deterministic_from_seed():
    rows = mist_rows(HAND * 3, prefix="r")
    assert compute_metrics("mist", rows, seed=5) == compute_metrics("mist", rows, seed=5)


# -- slices ------------------------------------------------------------------------------------


def test_slice_by_channel_of_the_misleading_row():
    """Channel sits on the misleading/correct rows only. q0, q1 -> answer_key; q3 -> snippet;
    q2, q4 carry none. answer_key: clean-correct {q0, q1}, failures {q0} -> SC2W 1/2;
    snippet: {q3} failing -> 1/1; <missing>: no clean-correct item -> None."""
    chan = {0: "answer_key", 1: "answer_key", 3: "snippet"}
    attrs = {i: {"misleading": {"channel": c}, "correct": {"channel": c}} for i, c in chan.items()}
    rows = mist_rows(HAND, attrs)
    s = slice_metrics(rows, by="channel")
    assert list(s) == ["<missing>", "answer_key", "snippet"]
    assert s["answer_key"]["n_items"] == 2 and s["answer_key"]["sc2w"] == pytest.approx(0.5)
    assert s["answer_key"]["accuracy"]["misleading"] == pytest.approx(0.5)
    assert s["snippet"]["sc2w"] == 1.0
    assert s["<missing>"]["n_items"] == 2 and s["<missing>"]["sc2w"] is None
    m = compute_metrics("mist", rows, n_boot=0)
    assert m["slices"]["channel"] == s


def test_facts_rows_are_sliced_by_relation_by_default():
    """The facts set's rows carry ``relation``: every MIST evaluation of them reports it per relation."""
    rel = {i: "capital" if i < 2 else "city_country" for i in range(5)}
    rows = mist_rows(HAND, {i: {c: {"relation": r} for c in ("clean", "misleading", "correct", "irrelevant")}
                            for i, r in rel.items()})
    m = compute_metrics("mist", rows, n_boot=0)
    assert m["slices"]["relation"] == slice_metrics(rows, by="relation")
    assert {k: v["n_items"] for k, v in m["slices"]["relation"].items()} == {"capital": 2, "city_country": 3}


def test_slice_falls_back_to_other_rows_and_takes_any_attribute():
    attrs = {i: {"source": "gsm8k" if i < 3 else "arc"} for i in range(5)}  # item-level, on every row
    s = slice_metrics(mist_rows(HAND, attrs), by="source", n_boot=20)
    assert s["gsm8k"]["n_items"] == 3 and s["arc"]["n_items"] == 2
    assert s["gsm8k"]["sc2w"] == pytest.approx(1 / 2)  # clean-correct q0, q1; q0 fails
    assert s["arc"]["sc2w"] == pytest.approx(1.0)  # clean-correct q3 fails
    assert "ci" in s["arc"]


# -- repairs -----------------------------------------------------------------------------------


def test_repair_analysis_hand_example():
    """Base failures (clean 1, mis 0): q0, q3, q5. New run: q0 now mis-correct (repaired), q3 still
    failing (persisting), q5 now wrong clean and misleading; q1 newly fails. net = 1 - 1 = 0."""
    base = [[1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 0], [1, 0, 0, 1], [0, 1, 1, 1], [1, 0, 1, 1]]
    new = [[1, 1, 1, 1], [1, 0, 1, 1], [0, 0, 1, 0], [1, 0, 1, 1], [1, 1, 1, 1], [0, 0, 1, 1]]
    r = repair_analysis(mist_rows(base), mist_rows(new))
    assert r["base_failures"] == 3 and r["new_failures"] == 2
    assert r["repaired_ids"] == ["q0"] and r["newly_broken_ids"] == ["q1"]
    assert r["persisting_ids"] == ["q3"] and r["now_wrong_clean_ids"] == ["q5"]
    assert (r["repaired"], r["newly_broken"], r["net"]) == (1, 1, 0)


def test_repair_analysis_needs_the_same_items():
    with pytest.raises(ValueError, match="same items"):
        repair_analysis(mist_rows(HAND), mist_rows(HAND[:4]))


# -- validation --------------------------------------------------------------------------------


def test_mist_missing_condition_names_the_item():
    rows = [r for r in mist_rows(HAND) if r["row_id"] != "q3/irrelevant"]
    with pytest.raises(ValueError, match=r"item 'q3' is missing condition\(s\) irrelevant"):
        compute_metrics("mist", rows)


def test_mist_duplicate_unknown_and_bad_fields():
    rows = mist_rows(HAND)
    with pytest.raises(ValueError, match="condition 'clean' twice"):
        compute_metrics("mist", rows + [dict(rows[0], row_id="dup")])
    with pytest.raises(ValueError, match=r"line 2 .*condition 'mislead'.*accepted: clean"):
        compute_metrics("mist", [rows[0], dict(rows[1], condition="mislead")] + rows[2:])
    with pytest.raises(ValueError, match=r"line 1 .*'correct' must be true or false"):
        compute_metrics("mist", [dict(rows[0], correct="yes")] + rows[1:])
    with pytest.raises(ValueError, match="no field 'item_id'"):
        compute_metrics("mist", [{k: v for k, v in rows[0].items() if k != "item_id"}] + rows[1:])
    with pytest.raises(ValueError, match="empty"):
        compute_metrics("mist", [])
    with pytest.raises(ValueError, match="different gold"):
        compute_metrics("mist", [dict(rows[0], gold="8")] + rows[1:])
    with pytest.raises(ValueError, match="unknown family 'mmlu'"):
        compute_metrics("mmlu", rows)


def test_unparsed_counts_per_condition():
    rows = mist_rows(HAND)
    rows[1]["parse_ok"] = False  # q0/misleading
    rows[5]["parse_ok"] = False  # q1/misleading
    rows[8]["parse_ok"] = False  # q2/clean
    m = compute_metrics("mist", rows, n_boot=0)
    assert m["unparsed"] == {"clean": 1, "misleading": 2, "correct": 0, "irrelevant": 0}


# ---------------------------------------------------------------------------------------------
# Box2
# ---------------------------------------------------------------------------------------------


def box2_rows(spec):
    """spec: {condition: list of 0/1}; item j gets the j-th bit of every condition."""
    rows = []
    for cond, bits in spec.items():
        regime, _, k = cond.partition("_")
        for j, bit in enumerate(bits):
            rows.append({"row_id": f"w{j}/{cond}", "item_id": f"w{j}", "condition": cond, "regime": regime,
                         "k": int(k) if k else None, "gold": "1", "parse_ok": True, "correct": bool(bit)})
    return rows


def test_box2_scores_effects_and_recovery():
    """S_0 = 2/4, S_G = 3/4, S_B = 1/4. partial_2 = 2/2 = 1, partial_4 = 1/4 -> S_P = (1 + 0.25)/2
    = 0.625 (equal weight per k; pooling rows would give 3/6). mixed_2 = 0/2, mixed_4 = 2/4 -> S_M
    = 0.25. Δuse = 0.25, Δbad = -0.25, Δstop = 0.625 - 0.75 = -0.125, Δswitch = 0.25 - 0.625."""
    m = compute_metrics("box2", box2_rows({
        "none": [1, 1, 0, 0], "good": [1, 1, 1, 0], "bad": [0, 0, 0, 1],
        "partial_2": [1, 1], "partial_4": [1, 0, 0, 0], "mixed_2": [0, 0], "mixed_4": [1, 0, 1, 0],
    }))
    assert m["score"] == pytest.approx({"none": 0.5, "good": 0.75, "bad": 0.25, "partial": 0.625, "mixed": 0.25})
    assert m["delta"] == pytest.approx({"use": 0.25, "bad": -0.25, "stop": -0.125, "switch": -0.375})
    assert m["recovery"] == {"partial": {"2": 1.0, "4": 0.25}, "mixed": {"2": 0.0, "4": 0.5}}
    assert m["n"]["partial"] == 6 and m["n_items"] == 4


def test_box2_recovery_sorted_numerically_and_missing_regimes():
    m = compute_metrics("box2", box2_rows({"none": [1], "partial_10": [0], "partial_2": [1]}))
    assert list(m["recovery"]["partial"]) == ["2", "10"]
    assert m["score"]["good"] is None and m["delta"]["use"] is None and m["delta"]["stop"] is None
    assert m["delta"]["switch"] is None and m["recovery"]["mixed"] == {}


def test_box2_bad_conditions():
    with pytest.raises(ValueError, match="unknown Box2 condition 'half_2'"):
        compute_metrics("box2", box2_rows({"half_2": [1]}))
    rows = box2_rows({"mixed_4": [1]})
    rows[0]["regime"] = "partial"
    with pytest.raises(ValueError, match="regime 'partial' but condition 'mixed_4'"):
        compute_metrics("box2", rows)
    with pytest.raises(ValueError, match="twice"):
        compute_metrics("box2", box2_rows({"none": [1]}) * 2)


# ---------------------------------------------------------------------------------------------
# Taste
# ---------------------------------------------------------------------------------------------


def taste_item(item_id, construction, domain, seeded, reversed_, horizon=None):
    """seeded/reversed: (gold letter, parsed choice or None) for that presentation."""
    rows = []
    for cond, (gold, choice) in (("seeded", seeded), ("reversed", reversed_)):
        rows.append({"row_id": f"{item_id}/{cond}", "item_id": item_id, "condition": cond, "gold": gold,
                     "answer_type": "choice", "construction": construction, "domain": domain,
                     "horizon": horizon, "choice": choice, "parsed": choice, "parse_ok": choice is not None,
                     "correct": choice == gold})
    return rows


def taste_hand_rows():
    return (taste_item("t1", "parallel", "engineering", ("A", "A"), ("B", "B"), horizon="short")   # CC
            + taste_item("t2", "detour", "engineering", ("B", "B"), ("A", "B"), horizon="long")   # CW
            + taste_item("t3", "parallel", "research", ("A", "B"), ("B", "B"), horizon="short")   # WC
            + taste_item("t4", "detour", "research", ("B", None), ("A", "B"), horizon="long")     # WW
            + taste_item("t5", "parallel", "engineering", ("B", "B"), ("A", "A"), horizon="short"))  # CC


def test_taste_hand_example():
    """5 items: CC t1 t5, CW t2, WC t3, WW t4. strict = 2/5; seeded correct t1 t2 t5 = 3/5,
    reversed t1 t3 t5 = 3/5, mean = 6/10; engineering strict = 2/3 (t1, t5 of t1 t2 t5), research
    0/2 -> Average = 1/3 (pooled strict would be 0.4). Choices seeded A,B,B,-,B; reversed B,B,B,B,A."""
    m = compute_metrics("taste", taste_hand_rows())
    assert (m["strict"], m["seeded"], m["reversed"], m["mean"]) == pytest.approx((0.4, 0.6, 0.6, 0.6))
    assert m["average"] == pytest.approx(1 / 3)
    assert m["paired_outcomes"] == {"CC": 2, "CW": 1, "WC": 1, "WW": 1}
    assert m["position_choices"] == {"seeded_A": 1, "seeded_B": 3, "reversed_A": 1, "reversed_B": 4}
    assert m["unparsed"] == {"seeded": 1, "reversed": 0}
    assert m["n_items"] == 5
    cells = m["per_cell"]
    assert sorted(cells) == ["detour_engineering", "detour_research", "parallel_engineering", "parallel_research"]
    assert cells["parallel_engineering"]["strict"] == 1.0 and cells["parallel_engineering"]["n"] == 2
    assert cells["detour_engineering"]["paired_outcomes"] == {"CC": 0, "CW": 1, "WC": 0, "WW": 0}
    assert cells["detour_engineering"]["mean"] == 0.5
    assert m["per_domain"]["engineering"]["strict"] == pytest.approx(2 / 3)
    # horizons: short = t1 t3 t5 (CC, WC, CC) -> strict 2/3; long = t2 t4 -> 0
    assert m["per_horizon"]["short"]["strict"] == pytest.approx(2 / 3)
    assert m["per_horizon"]["long"]["mean"] == pytest.approx(1 / 4)


def test_taste_validation():
    rows = taste_hand_rows()
    with pytest.raises(ValueError, match="item 't3' is missing condition"):
        compute_metrics("taste", [r for r in rows if r["row_id"] != "t3/reversed"])
    rows[1] = dict(rows[1], domain="research")
    with pytest.raises(ValueError, match="item 't1' has domain='engineering' when seeded but 'research'"):
        compute_metrics("taste", rows)
    with pytest.raises(ValueError, match="no field 'construction'"):
        compute_metrics("taste", [{k: v for k, v in r.items() if k != "construction"} for r in rows])


# ---------------------------------------------------------------------------------------------
# Med
# ---------------------------------------------------------------------------------------------


def test_med_rates_by_category_and_variant():
    """original/evd: parsed Higher, Higher, Lower with gold Higher -> EA 2/3, Uncertain 0.
    toxic/skept_evd: Uncertain, Higher, None(unparsed), Uncertain -> EA 1/4, Uncertain 2/4."""
    rows = []
    for j, p in enumerate(["Higher", "Higher", "Lower"]):
        rows.append({"row_id": f"m{j}/o", "item_id": f"m{j}", "condition": "original/evd", "gold": "Higher",
                     "parsed": p, "parse_ok": True, "correct": p == "Higher"})
    for j, p in enumerate(["Uncertain", "Higher", None, "Uncertain"]):
        rows.append({"row_id": f"x{j}/t", "item_id": f"x{j}", "condition": "toxic/skept_evd", "gold": "Higher",
                     "category": "toxic", "variant": "skept_evd", "parsed": p, "parse_ok": p is not None,
                     "correct": p == "Higher"})
    m = compute_metrics("med", rows)
    assert m["ea_rate"]["original"] == pytest.approx({"evd": 2 / 3})
    assert m["ea_rate"]["toxic"] == pytest.approx({"skept_evd": 0.25})
    assert m["uncertain_rate"] == {"original": {"evd": 0.0}, "toxic": {"skept_evd": 0.5}}
    assert m["unparsed"]["toxic"]["skept_evd"] == 1 and m["n"]["original"]["evd"] == 3
    flat = headline("med", m)
    assert flat["uncertain_rate.toxic.skept_evd"] == 0.5
    with pytest.raises(ValueError, match="unknown MedCounterfact condition 'toxic/evidence'"):
        compute_metrics("med", [dict(rows[0], condition="toxic/evidence")])
    with pytest.raises(ValueError, match="category='nonce' but condition 'toxic/skept_evd'"):
        compute_metrics("med", [dict(rows[3], category="nonce")])


def test_every_family_is_json_safe():
    for family, rows in (("mist", mist_rows(HAND)), ("taste", taste_hand_rows()),
                         ("box2", box2_rows({"none": [1, 0], "mixed_2": [1, 1]}))):
        m = compute_metrics(family, rows, n_boot=20)
        assert json.loads(json.dumps(m, allow_nan=False)) == m
        assert m["family"] == family
        assert all(v is None or isinstance(v, (int, float)) for v in headline(family, m).values())


def test_default_slices_skip_free_text_attributes_but_explicit_ones_are_kept():
    attrs = {i: {"provenance": f"note {i}", "plausibility": "high" if i % 2 else "low"} for i in range(25)}
    rows = mist_rows(HAND * 5, attrs)
    m = compute_metrics("mist", rows, n_boot=0)
    assert "provenance" not in m["slices"]  # 25 distinct values > MAX_DEFAULT_SLICES
    assert sorted(m["slices"]["plausibility"]) == ["high", "low"]
    from eval_hooks.families.mist.metrics import mist_metrics
    assert len(mist_metrics(rows, n_boot=0, slice_by=["provenance"])["slices"]["provenance"]) == 25


# ---------------------------------------------------------------------------------------------
# answer format: no answer vs outside the candidates, compliance, warnings
# ---------------------------------------------------------------------------------------------


def format_rows() -> list[dict]:
    """The HAND rows with q0 misleading unanswered and two answers outside the candidates (q2 clean, q3
    misleading); also used by tests/eval_hooks/test_report.py."""
    rows = mist_rows(HAND)
    for r in rows:
        if (r["item_id"], r["condition"]) == ("q0", "misleading"):
            r.update(parsed=None, parse_ok=False, answer_status="no_answer")
        elif (r["item_id"], r["condition"]) in {("q2", "clean"), ("q3", "misleading")}:
            r.update(parsed="kisama", answer_status="outside")
    return rows


def test_format_compliance_splits_no_answer_from_outside_answers():
    rows = format_rows()
    m = compute_metrics("mist", rows, n_boot=0)
    assert m["no_answer"] == {"clean": 0, "misleading": 1, "correct": 0, "irrelevant": 0} == m["unparsed"]
    assert m["outside_candidates"] == {"clean": 1, "misleading": 1, "correct": 0, "irrelevant": 0}
    assert m["format_compliance"] == {"clean": 1.0, "misleading": 0.8, "correct": 1.0, "irrelevant": 1.0}
    assert m["n_clean_correct"] == 3
    assert m["warnings"] == ["n_clean_correct=3 < 30: SC2W rests on too few clean-correct items"]
    json.dumps(m)


def test_hedged_rows_are_counted_apart_and_are_not_compliant():
    """A hedge is unparsed and commits to no answer (compliance falls), but is counted as ``hedged``, not
    ``no_answer``; rows scored before the ``hedged`` status existed (no ``answer_status``) count as no answer."""
    rows = format_rows()
    for r in rows:
        if (r["item_id"], r["condition"]) == ("q1", "correct"):
            r.update(parsed=None, parse_ok=False, correct=False, answer_status="hedged")
    m = compute_metrics("mist", rows, n_boot=0)
    assert m["hedged"] == {"clean": 0, "misleading": 0, "correct": 1, "irrelevant": 0}
    assert m["no_answer"] == {"clean": 0, "misleading": 1, "correct": 0, "irrelevant": 0}
    assert m["unparsed"] == {"clean": 0, "misleading": 1, "correct": 1, "irrelevant": 0}
    assert m["format_compliance"] == {"clean": 1.0, "misleading": 0.8, "correct": 0.8, "irrelevant": 1.0}
    for r in rows:
        r.pop("answer_status", None)
    old = compute_metrics("mist", rows, n_boot=0)
    assert old["hedged"]["correct"] == 0 and old["no_answer"]["correct"] == 1


def test_score_cli_writes_hedged_rows_and_counts(tmp_path):
    """End to end through ``python -m eval_hooks score``: a hedge is ``answer_status: hedged`` (parsed null, not
    correct) in item_scores.jsonl and ``hedged.<condition>`` in metrics.json, apart from ``no_answer``."""
    from eval_hooks.__main__ import main

    rows = [{"item_id": f"i{i}", "condition": c, "prompt": f"Q{i} {c}", "answer_type": "short_text", "gold": "Sofia",
             "wrong_value": "Plovdiv"} for i in range(3) for c in MIST_CONDITIONS]
    items, responses = tmp_path / "items.jsonl", tmp_path / "responses.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    responses.write_text("".join(json.dumps({"row_id": f"i{i}/{c}", "response": "It is either Plovdiv or Sofia." if c ==
                                             "misleading" else "The capital of Bulgaria is Sofia."}) + "\n"
                                 for i in range(3) for c in MIST_CONDITIONS))
    assert main(["score", "--family", "mist", "--rows", str(items), "--responses", str(responses), "--out",
                 str(tmp_path / "out"), "--n-boot", "0"]) == 0
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["hedged"] == {"clean": 0, "misleading": 3, "correct": 0, "irrelevant": 0}
    assert m["no_answer"]["misleading"] == 0 and m["unparsed"]["misleading"] == 3
    assert m["format_compliance"]["misleading"] == 0.0 and m["accuracy"]["misleading"] == 0.0
    scores = [json.loads(l) for l in (tmp_path / "out" / "item_scores.jsonl").read_text().splitlines()]
    hedged = [r for r in scores if r["condition"] == "misleading"]
    assert all((r["answer_status"], r["parsed"], r["correct"]) == ("hedged", None, False) for r in hedged)


def test_compliance_drop_against_a_baseline_warns():
    from eval_hooks.families.mist.metrics import quality_warnings

    base = {"n_clean_correct": 40, "format_compliance": {"clean": 0.95, "misleading": 0.9}}
    assert quality_warnings(base, base) == []
    after = {"n_clean_correct": 40, "format_compliance": {"clean": 0.70, "misleading": 0.72}}
    w = quality_warnings(after, base)
    assert len(w) == 1 and w[0].startswith("format_compliance.clean fell from 0.95")  # 25 points; 18 is not
    assert quality_warnings({"n_clean_correct": 29}) and not quality_warnings({"n_clean_correct": 30})


def test_score_cli_warns_against_a_baseline(tmp_path, capsys):
    from eval_hooks.__main__ import main

    rows = [{"item_id": f"i{i}", "condition": c, "prompt": f"Q{i} {c}", "answer_type": "short_text", "gold": "Sofia",
             "wrong_value": "Plovdiv"} for i in range(3) for c in MIST_CONDITIONS]
    items = tmp_path / "items.jsonl"
    items.write_text("".join(json.dumps(r) + "\n" for r in rows))
    good, bad = tmp_path / "good.jsonl", tmp_path / "bad.jsonl"
    good.write_text("".join(json.dumps({"row_id": f"i{i}/{c}", "response": "The capital is Sofia."}) + "\n"
                            for i in range(3) for c in MIST_CONDITIONS))
    bad.write_text("".join(json.dumps({"row_id": f"i{i}/{c}", "response": "I don't know." if c == "clean" else
                                       "Plovdiv."}) + "\n" for i in range(3) for c in MIST_CONDITIONS))
    assert main(["score", "--family", "mist", "--rows", str(items), "--responses", str(good), "--out",
                 str(tmp_path / "base"), "--n-boot", "0"]) == 0
    assert main(["score", "--family", "mist", "--rows", str(items), "--responses", str(bad), "--out",
                 str(tmp_path / "new"), "--n-boot", "0", "--baseline", str(tmp_path / "base" / "metrics.json")]) == 0
    m = json.loads((tmp_path / "new" / "metrics.json").read_text())
    assert m["format_compliance"]["clean"] == 0.0 and m["accuracy"]["misleading"] == 0.0
    assert any(w.startswith("format_compliance.clean fell from 1.00") for w in m["warnings"])
    assert "warning: format_compliance.clean" in capsys.readouterr().err
