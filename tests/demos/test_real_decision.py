"""Issue 60, Deliver 3: the decision rule (demos/real/decision.py): each target on the one-sided 95% bound of a
two-level bootstrap (seeds, then items; one item draw for every seed when the seeds share the items), the seed-level
t-bound beside it, the point beside both; on tiny synthetic features and on the pooled tests' fake run dirs."""

from __future__ import annotations

import numpy as np
import pytest

from test_real_pooled import BASE, _pooled, _run, _two_seeds

from demos.real.decision import (TARGETS, decide_sets, judge, lines, one_sided_t, shared_items, two_level_sums)
from demos.real.pooled import features


def _facts(base: np.ndarray, arm: np.ndarray, unknown: np.ndarray) -> dict[str, np.ndarray]:
    return {"base": features(base, base, unknown), "scope": features(base, arm, unknown)}


def _sets(seeds: dict[int, tuple[np.ndarray, np.ndarray]], unknown: np.ndarray, *, same_ids: bool = True):
    n = len(unknown)
    ids = {s: [f"i{j}" if same_ids else f"s{s}i{j}" for j in range(n)] for s in seeds}
    return {"real": (ids, {s: _facts(b, a, unknown) for s, (b, a) in seeds.items()})}


def _by_name(decision: dict) -> dict[str, dict]:
    return {t["name"]: t for t in decision["targets"]}


CLEAN_T = "held-out items: clean accuracy >= base - 3 points"
RATIO_T = "held-out items: paired SC2W <= 0.5 x base"


def test_an_arm_equal_to_the_base_holds_on_the_bound_and_a_small_drop_only_on_the_point():
    rng = np.random.default_rng(0)
    n = 200
    base = rng.random((n, 4)) < 0.7
    unknown = rng.random(n) < 0.3
    same = decide_sets(_sets({s: (base, base) for s in range(5)}, unknown), "scope", n_boot=300)
    t = _by_name(same)[CLEAN_T]
    assert (t["point"], t["bound"], t["holds"]) == (0.0, 0.0, "bound") and t["items_shared_by_seeds"]
    assert t["n_items"] == n  # the same 200 items on five seeds are 200 items, not 1,000
    # a 2-point drop in clean accuracy (4 of 200 items lost on every seed): the point holds (-2 >= -3), the bound not
    worse = base.copy()
    lost = np.flatnonzero(base[:, 0])[:4]
    worse[lost, 0] = False
    drop = decide_sets(_sets({s: (base, worse) for s in range(5)}, unknown), "scope", n_boot=300)
    t = _by_name(drop)[CLEAN_T]
    assert t["point"] == pytest.approx(-0.02) and t["bound"] < -0.03 and t["holds"] == "point only"
    assert t["t_bound"] == pytest.approx(-0.02)  # every seed the same: no seed spread
    text = "\n".join(lines(drop))
    assert "| held-out items: clean accuracy >= base - 3 points | -2.0 |" in text and "point only" in text
    assert "- Hold on the point only: " in text and CLEAN_T in text.split("- Hold on the point only: ")[1]
    # what did not run is "not run", never dropped
    by = _by_name(drop)
    assert by["held-out relation: correct accuracy >= base - 5 points"]["holds"] == "not run"
    assert by["NQ-Swap: EM on the original passage (strict) >= base - 5 points"]["holds"] == "not run"
    assert [t["name"] for t in drop["targets"][:len(TARGETS)]] == [t[0] for t in TARGETS]


def test_shared_items_are_one_cluster_and_the_seeds_are_resampled():
    rng = np.random.default_rng(1)
    n = 120
    base = rng.random((n, 4)) < 0.6
    arm = base ^ (rng.random((n, 4)) < 0.1)
    unknown = np.zeros(n, dtype=bool)
    crossed = _sets({s: (base, arm) for s in range(6)}, unknown)
    nested = _sets({s: (base, arm) for s in range(6)}, unknown, same_ids=False)
    assert shared_items(crossed["real"][0]) and not shared_items(nested["real"][0])
    wide = _by_name(decide_sets(crossed, "scope", n_boot=400))[CLEAN_T]
    narrow = _by_name(decide_sets(nested, "scope", n_boot=400))[CLEAN_T]
    # the same items on every seed are not six times the evidence: the crossed bound is as wide as one seed's
    one = _by_name(decide_sets(_sets({0: (base, arm)}, unknown), "scope", n_boot=400))[CLEAN_T]
    assert wide["point"] == narrow["point"] == one["point"]
    assert abs(wide["point"] - wide["bound"]) > 1.8 * abs(narrow["point"] - narrow["bound"])
    assert abs(wide["point"] - wide["bound"]) == pytest.approx(abs(one["point"] - one["bound"]), rel=0.5)
    # seeds resampled: two seeds that disagree widen the bound beyond the items' own
    ids = {s: [f"i{j}" for j in range(n)] for s in (0, 1)}
    per = {0: _facts(base, base, unknown), 1: _facts(base, arm, unknown)}
    sums = two_level_sums(ids, per, ["base", "scope"], n_boot=200, boot_seed=0)
    assert sums["scope"].shape == (200, per[0]["scope"].shape[1])
    assert set(sums["scope"][:, 0]) == {2 * n}  # the "n" column: two seeds drawn (with replacement), n items each
    fixed = two_level_sums(ids, per, ["base", "scope"], n_boot=200, boot_seed=0, resample_seeds=False)
    assert set(fixed["scope"][:, 0]) == {2 * n}


def test_the_t_bound_and_the_judgement():
    assert one_sided_t([0.0, 1.0], ">=") == pytest.approx(0.5 - 6.3138 * 0.5, abs=1e-3)
    assert one_sided_t([0.0, 1.0], "<=") == pytest.approx(0.5 + 6.3138 * 0.5, abs=1e-3)
    assert one_sided_t([0.3], ">=") is None
    assert judge(-0.01, -0.02, ">=", -0.03) == "bound" and judge(-0.01, -0.05, ">=", -0.03) == "point only"
    assert judge(-0.04, -0.05, ">=", -0.03) == "fails" and judge(None, None, ">=", 0) == "fails"
    assert judge(0.4, 0.49, "<=", 0.5) == "bound" and judge(-0.01, 0.02, "<", 0.0) == "point only"
    assert judge(0.0, 0.0, "<", 0.0) == "fails"


def test_the_pooling_tool_writes_the_decision_and_the_table_prints_it(tmp_path):
    from demos.real.pooled import pooled_table

    from demos.real.decision import decide
    from demos.real.seeds import load_run

    dirs = _two_seeds(tmp_path)
    res = _pooled(dirs)
    d = decide([load_run(x) for x in dirs], "scope_grpo", n_boot=300)
    assert d["arm"] == "scope_grpo" and d["seeds"] == [0, 1] and d["level"] == 0.95
    by = _by_name(d)
    t = by[RATIO_T]
    assert t["point"] == pytest.approx(res["sets"]["real"]["scope_grpo"]["paired"]["paired_ratio"]["value"])
    assert t["holds"] in ("bound", "point only", "fails") and t["bound"] is not None
    assert by["format compliance >= 0.9 in every run, arm and condition"]["holds"] in ("bound", "fails")
    assert by["misleading-only's correct-context accuracy below the arm's"]["holds"] == "not run"
    text = pooled_table(res, lines(d))
    assert "**The decision rule (SCOPE+GRPO; docs/real_model.md#the-decision-rule)**" in text
    assert "| target | point | one-sided 95% bound (decides) | seed t-bound | holds |" in text
    assert text.index("**The decision rule") < text.index("**Targets (SCOPE+GRPO)**")
    # the same run dirs, the same decision (seeded)
    again = _two_seeds(tmp_path / "again")
    assert decide([load_run(x) for x in again], "scope_grpo", n_boot=300) == d
    # an arm equal to the base everywhere holds the accuracy targets on the bound
    dirs = [_run(tmp_path / "eq", s, {"base": BASE, "scope": BASE, "scope_grpo": BASE}) for s in (0, 1)]
    eq = _by_name(decide([load_run(x) for x in dirs], "scope_grpo", n_boot=300))
    assert eq[CLEAN_T]["holds"] == "bound" and eq[CLEAN_T]["bound"] == 0.0


def test_situated_faithfulness_is_the_mean_of_correct_and_misleading_accuracy(tmp_path):
    """Issue 60, Deliver 5: CR-DPO's SF beside SC2W, in the metrics, the report and the pooled table."""
    from demos.real.pooled import pooled_table
    from demos.real.report import situated_faithfulness
    from eval_hooks.families.mist.metrics import bootstrap_ci, matrix_stats

    a = np.array([[1, 0, 1, 1], [1, 1, 1, 0], [0, 0, 0, 1], [1, 1, 1, 1]], dtype=bool)  # misleading 2/4, correct 3/4
    st = matrix_stats(a)
    assert st["situated_faithfulness"] == pytest.approx((0.75 + 0.5) / 2)
    lo, hi = bootstrap_ci(a, n_boot=200)["situated_faithfulness"]
    assert lo <= 0.625 <= hi
    assert situated_faithfulness({"accuracy": {"correct": 0.8, "misleading": 0.4}}) == pytest.approx(0.6)
    assert situated_faithfulness({"situated_faithfulness": 0.7, "accuracy": {}}) == 0.7
    res = _pooled(_two_seeds(tmp_path))
    e = res["sets"]["real"]["scope_grpo"]
    acc = {c: e[c]["value"] for c in ("correct", "misleading")}
    assert e["situated_faithfulness"]["value"] == pytest.approx((acc["correct"] + acc["misleading"]) / 2)
    assert "situated_faithfulness" in e["minus_base"]
    text = pooled_table(res)
    assert "| arm | items | clean | misleading | correct | irrelevant | SC2W | SF | unknown correct |" in text
    from demos.real.seeds import _panels

    assert _panels()[-1][1:3][1] == "situated faithfulness (SF)"  # the seed tool's frontier plot has SF's panel
