"""NQ-Swap in the real demos (issue 52, item 4; demos/real/nq_swap.py): the stages the full experiment adds and the
quick demo does not, the settings, the summary, the report's table and target, on synthetic summaries and on stage
dirs written by the nq_swap family itself from scripted responses (the seed tool's pooling and frontier:
tests/demos/test_real_pooled_nq_swap.py)."""

from __future__ import annotations

import copy
import json

import pytest

from test_real_demo import _compose, _summary

# Today's stage lists (before NQ-Swap): the main job's default, and the full experiment's.
MAIN = ["convert", "facts", "eval_sample", "eval_base", "transfer_base", "mine", "knowledge_aware",
         "eval_knowledge_aware", "transfer_knowledge_aware", "grpo_prompts", "ka_grpo", "eval_ka_grpo",
         "transfer_ka_grpo"]
FULL = ["convert", "facts", "eval_base", "transfer_base", "mine", "scope", "eval_scope", "transfer_scope",
        "misleading_only", "eval_misleading_only", "transfer_misleading_only", "knowledge_aware",
        "eval_knowledge_aware", "transfer_knowledge_aware", "grpo_prompts", "scope_grpo", "eval_scope_grpo",
        "transfer_scope_grpo", "ka_grpo", "eval_ka_grpo", "transfer_ka_grpo"]
TARGET = "SCOPE+GRPO NQ-Swap correct-context exact match >= base - 0.05"


def _names(overrides: list[str]) -> list[str]:
    from demos.real.pipeline import stages

    return [s.name for s in stages(_compose(overrides))]


def test_the_main_job_is_unchanged_and_the_full_experiment_adds_nq_swap_for_every_model(tmp_path):
    from demos.config import DEMOS

    out = f"out={tmp_path}"
    assert _names([out]) == MAIN  # real.nq_swap_questions=null: the main job's own, 0
    assert _names([out, "real.nq_swap_questions=0"]) == MAIN
    assert _names([out, "demo=real_full", "real.nq_swap_questions=0"]) == FULL
    assert (DEMOS["real"].nq_swap_questions, DEMOS["real_full"].nq_swap_questions) == (0, 300)
    full = _names([out, "demo=real_full"])
    models = ["base", "scope", "misleading_only", "knowledge_aware", "scope_grpo", "ka_grpo"]
    assert [n for n in full if n.startswith("nqswap_")] == ["nqswap_rows", *(f"nqswap_{m}" for m in models)]
    assert [n for n in full if not n.startswith("nqswap_")] == FULL
    # the rows once, after the facts; each model's NQ-Swap evaluation after its held-out relation's
    assert full.index("nqswap_rows") == full.index("facts") + 1
    for m in models:
        assert full.index(f"nqswap_{m}") == full.index(f"transfer_{m}") + 1
    # the main job with NQ-Swap switched on: its own models only
    assert [n for n in _names([out, "real.nq_swap_questions=5"]) if n.startswith("nqswap_")] == [
        "nqswap_rows", "nqswap_base", "nqswap_knowledge_aware", "nqswap_ka_grpo"]
    # no dev part: a dev run leaves it out, as it leaves out nothing else
    dev = _names([out, "demo=real_full", "real.split=dev"])
    assert not any(n.startswith("nqswap") for n in dev) and len(dev) == len(FULL)


def test_every_nq_swap_evaluation_reads_the_one_rows_file_split_by_the_base_s_knowledge(tmp_path):
    from demos.real.pipeline import stages

    by = {s.name: s for s in stages(_compose([f"out={tmp_path}", "demo=real_full"]))}
    base = by["nqswap_base"]
    assert base.recipe == "evaluate" and base.inputs == {"model.path": "convert", "eval.path": "nqswap_rows/rows.jsonl"}
    assert base.overrides[:2] == ["model=smollm2_135m", "eval=nq_swap"]
    assert base.overrides[-2:] == ["knowledge.k=1", "knowledge.enabled=true"]  # real.stages.knowledge: one greedy answer
    for arm in ("scope", "misleading_only", "knowledge_aware", "scope_grpo"):
        s = by[f"nqswap_{arm}"]
        assert s.inputs == {"model.path": "convert", "eval.path": "nqswap_rows/rows.jsonl", "adapter_path": arm,
                            "eval.knowledge_path": "nqswap_base/knowledge.jsonl"}
        assert "knowledge.enabled=true" not in s.overrides and "eval=nq_swap" in s.overrides
    assert by["nqswap_rows"].call is not None and by["nqswap_rows"].recipe is None


def test_the_rows_step_builds_the_seeded_sample_of_the_setting_s_size(tmp_path):
    from demos.real.pipeline import stages
    from eval_hooks.families.nq_swap.items import SAMPLE_PATH
    from selectrust.core.io import read_records

    sample = [f"real.nq_swap_data={SAMPLE_PATH}", "real.nq_swap_questions=40"]

    def rows(seed: int, *extra: str) -> tuple[dict, list[dict]]:
        step = {s.name: s for s in stages(_compose([f"out={tmp_path}", "demo=real_full", f"seed={seed}", *extra]))}
        out = tmp_path / f"rows{seed}{len(extra)}{abs(hash(extra))}"
        info = step["nqswap_rows"].call(out)
        return info, [r for _, r in read_records(out / "rows.jsonl")]

    info, got = rows(0, *sample)
    assert (info["items"], info["rows"], info["seed"], info["max_context_words"]) == (40, 160, 0, 150)
    assert info["source"] == "eval_hooks/data/nq_swap_sample.jsonl (the shipped sample)" and "out" not in info
    assert len(got) == 160 and len({r["item_id"] for r in got}) == 40
    # issue 60: one fixed set for every run seed (real.nq_swap_seed=0, the default); null: the run's seed draws them
    assert rows(0, *sample)[1] == got and rows(1, *sample)[1] == got
    assert rows(1, *sample, "real.nq_swap_seed=null")[1] != got
    small, few = rows(0, *sample, "real.nq_swap_questions=6", "real.nq_swap_max_context_words=80")
    assert (small["items"], small["max_context_words"]) == (6, 80) and len(few) == 24
    assert all(r["context_words"] <= 80 for r in few if r.get("context_words") is not None)


def test_the_full_experiment_evaluates_300_fixed_questions_of_the_shipped_whole_set(tmp_path):
    """Issue 60, Deliver 4: the whole NQ-Swap ships with the package; the full experiment draws 300 distinct
    questions (passages of at most 150 words) once, with seed 0, whatever the run's seed."""
    from demos.real.nq_swap import FULL_NAME
    from demos.real.pipeline import stages
    from eval_hooks.families.nq_swap.items import FULL_PATH
    from selectrust.core.io import read_records

    assert FULL_PATH.is_file() and (FULL_PATH.parent / "LICENSE.nq_swap").is_file()
    assert (FULL_PATH.parent / "README.md").is_file()
    step = {s.name: s for s in stages(_compose([f"out={tmp_path}", "demo=real_full", "seed=7"]))}["nqswap_rows"]
    info = step.call(tmp_path / "rows")
    got = [r for _, r in read_records(tmp_path / "rows" / "rows.jsonl")]
    assert (info["items"], info["seed"], info["max_context_words"], info["kept_questions"]) == (300, 0, 150, 1348)
    assert info["source"] == f"{FULL_NAME} (the shipped whole set)" and info["questions"] == 1667
    assert len({r["question"] for r in got}) == 300 == len({r["item_id"] for r in got})


@pytest.mark.parametrize("bad,message", [
    ("real.nq_swap_questions=1", r"^real.nq_swap_questions=1: 0 \(off\) or at least 2"),
    ("real.nq_swap_questions=-3", r"^real.nq_swap_questions=-3: 0 \(off\) or at least 2"),
    ("real.nq_swap_max_context_words=0", r"^real.nq_swap_max_context_words=0: at least 1"),
    ("real.nq_swap_data=nowhere/nq.jsonl", r"^real.nq_swap_data='nowhere/nq.jsonl': no such file, nor a Hub id"),
])
def test_bad_nq_swap_settings_fail_in_one_line_before_any_stage(tmp_path, bad, message):
    from demos.real.pipeline import stages
    from selectrust.core.errors import ConfigError

    with pytest.raises(ConfigError, match=message) as e:
        stages(_compose([f"out={tmp_path}", "demo=real_full", bad]))
    assert "\n" not in str(e.value) and not (tmp_path / "stages").exists()


def test_a_hub_id_is_taken_as_given_and_read_only_by_the_step(tmp_path):
    from demos.real.nq_swap import data_source

    assert data_source(_compose([f"out={tmp_path}", "real.nq_swap_data=pminervini/NQ-Swap"])) == "pminervini/NQ-Swap"


# -- scored by the family: stage dirs as the evaluate recipe writes them ------------------------------------------
# Four items of the shipped sample; the base's estimate labels the first two known. Under the substituted passage
# (misleading) each model names the substitute (sub), the original (org), both, or neither (none); under the original
# passage (correct) it names the original answer (1) or not (0).
BASE_SAYS = {"misleading": ("sub", "sub", "sub", "none"), "correct": (1, 1, 1, 0)}
ARM_SAYS = {"misleading": ("org", "sub", "sub", "org"), "correct": (1, 1, 0, 0)}  # EM 2/4 against the base's 3/4
KNOWN = ("known", "known", "unknown", "unknown")


def _nq_rows():
    from eval_hooks.families.nq_swap.items import SAMPLE_PATH, build_rows, read_source

    rows, _ = build_rows(read_source(SAMPLE_PATH)[0], items=4, seed=0)
    ids = list(dict.fromkeys(r["item_id"] for r in rows))
    return [{**r, "knowledge": KNOWN[ids.index(r["item_id"])]} for r in rows], ids


def _evaluate(stage_dir, says: dict) -> dict:
    """The nq_swap family's own scoring of scripted responses, written as an evaluation stage writes it."""
    from eval_hooks.families import get_family

    rows, ids = _nq_rows()
    fam = get_family("nq_swap")
    loaded = fam.expand_records(list(enumerate(rows, start=1)), "rows")
    responses = {}
    for r in loaded:
        n = ids.index(r["item_id"])
        gold, sub = r["gold"], r["wrong_value"]
        if r["condition"] == "misleading":
            text = {"org": gold, "sub": sub, "both": f"{gold} or {sub}", "none": "Something else entirely."}[
                says["misleading"][n]]
        elif r["condition"] == "correct":
            text = gold if says["correct"][n] else "Something else entirely."
        else:
            text = "I don't know."
        responses[r["row_id"]] = text
    return fam.score_responses(loaded, responses, stage_dir, n_boot=50)


def test_the_family_s_metrics_are_the_hand_counted_ones(tmp_path):
    base, arm = _evaluate(tmp_path / "b", BASE_SAYS)["nq_swap"], _evaluate(tmp_path / "a", ARM_SAYS)["nq_swap"]
    assert (base["em_org_context"], base["p_sub"], base["p_org"], base["memorization_ratio"]) == (0.75, 0.75, 0.0, 0.0)
    assert (arm["em_org_context"], arm["p_sub"], arm["p_org"], arm["memorization_ratio"]) == (0.5, 0.5, 0.5, 0.5)
    known = arm["by_knowledge"]["known"]
    assert (known["n_items"], known["p_sub"], known["memorization_ratio"]) == (2, 0.5, 0.5)
    assert base["by_knowledge"]["known"]["p_sub"] == 1.0


def test_summary_has_nq_swap_for_every_model_and_its_rows_only_when_evaluated(tmp_path):
    from demos.real.pipeline import arms, summary_of
    from selectrust.core.io import write_jsonl_atomic

    cfg = _compose([f"out={tmp_path}", "demo=real_full"])
    names = ("base", *arms(cfg))
    for prefix in ("eval", "transfer"):  # the facts sets' item scores (the paired SC2W reads them)
        write_jsonl_atomic(tmp_path / "stages" / f"{prefix}_base" / "knowledge.jsonl", [
            {"item_id": f"i{n}", "knowledge": "known", "score": 1.0, "clean_accuracy": 1.0} for n in range(2)])
        for arm in names:
            write_jsonl_atomic(tmp_path / "stages" / f"{prefix}_{arm}" / "item_scores.jsonl", [
                {"item_id": f"i{n}", "condition": c, "correct": c != "misleading"} for n in range(2)
                for c in ("clean", "misleading", "correct", "irrelevant")])
    results = {f"{p}_{a}": {"stage": f"{p}_{a}"} for p in ("eval", "transfer", "nqswap") for a in names}
    results["nqswap_rows"] = {"items": 40, "rows": 160, "seed": 0}
    results["mine"] = {"kept": 3, "knowledge": {"counts": {}}}
    s = summary_of(cfg, results)
    assert s["nq_swap"] == {a: {"stage": f"nqswap_{a}"} for a in names} and list(s["nq_swap"])[0] == "base"
    assert s["items"]["nq_swap"] == {"file": "nqswap_rows/rows.jsonl", "sample": results["nqswap_rows"]}
    # the quick demo's summary: the same keys as before NQ-Swap
    quick = summary_of(_compose([f"out={tmp_path}"]), results)
    assert "nq_swap" not in quick and set(quick["items"]) == {"real", "transfer"}
    assert "nq_swap" not in summary_of(_compose([f"out={tmp_path}", "demo=real_full", "real.nq_swap_questions=0"]),
                                       results)


# -- the target and the report, on synthetic summaries -------------------------------------------------------
def _nq_metrics(em: float, p_sub: float, p_org: float, known_p_sub: float | None = 0.5, n: int = 40) -> dict:
    mr = None if p_org + p_sub == 0 else p_org / (p_org + p_sub)
    known = {} if known_p_sub is None else {"known": {"n_items": 2, "p_sub": known_p_sub, "memorization_ratio": 0.5,
                                                      "ci": {"p_sub": [0.0, 1.0], "memorization_ratio": [0.0, 1.0]}}}
    ci = {k: [max(0.0, v - 0.1), min(1.0, v + 0.1)] for k, v in (("em_org_context", em), ("p_sub", p_sub),
                                                                  ("p_org", p_org))}
    return {"nq_swap": {"n_items": n, "em_org_context": em, "p_sub": p_sub, "p_org": p_org, "memorization_ratio": mr,
                        "ci": {**ci, "memorization_ratio": None if mr is None else [0.0, 0.5]},
                        "by_knowledge": {**known, "unknown": {"n_items": n - 2}}}}


def _with_nq() -> dict:
    s = copy.deepcopy(_summary())
    s["nq_swap"] = {"base": _nq_metrics(0.45, 0.35, 0.025, 1.0), "scope": _nq_metrics(0.42, 0.30, 0.05),
                    "scope_grpo": _nq_metrics(0.40, 0.20, 0.10)}
    s["items"] = {"nq_swap": {"file": "nqswap_rows/rows.jsonl", "sample": {
        "items": 40, "rows": 160, "source": "eval_hooks/data/nq_swap_sample.jsonl (the shipped sample)", "seed": 0,
        "kept_questions": 50, "max_context_words": 150, "context_words": {"min": 5, "median": 76, "max": 148},
        "by_channel": {"paragraph": 29, "table": 6, "list": 5}}}}
    return s


def test_the_nq_swap_target_is_correct_context_exact_match_within_5_points_of_the_base_s():
    from demos.real.report import TARGETS, check_targets

    assert TARGETS["nq_swap_em_drop_max"] == 0.05
    s = _with_nq()
    t = check_targets(s)
    assert t[TARGET] is True  # 40.0% against the base's 45.0%: exactly 5 points
    s["nq_swap"]["scope_grpo"]["nq_swap"]["em_org_context"] = 0.399
    assert [k for k, ok in check_targets(s).items() if not ok] == [TARGET]
    assert check_targets(s, "scope")["SCOPE NQ-Swap correct-context exact match >= base - 0.05"] is True
    # not evaluated (the quick demo), or not this arm: not run, never dropped
    del s["nq_swap"]
    assert check_targets(s)[TARGET] is None
    s = _with_nq()
    del s["nq_swap"]["scope_grpo"]
    assert check_targets(s)[TARGET] is None


def test_the_report_has_the_nq_swap_table_with_intervals_or_says_not_run(tmp_path, capsys):
    from demos.real.report import check_targets, print_table, write_report

    s = _with_nq()
    s["targets"] = check_targets(s)
    text = write_report(s, tmp_path).read_text()
    assert "## NQ-Swap (an outside benchmark)" in text
    assert "40 questions (160 rows) of eval_hooks/data/nq_swap_sample.jsonl (the shipped sample), drawn with seed 0" \
        in text
    # EM strict: "–" in a summary from before it was recorded
    assert ("| base | 40 | 45.0% [35.0, 55.0] | – | – | 35.0% [25.0, 45.0] | 2.5% [0.0, 12.5] | 6.7% [0.0, 50.0] | 2 | "
            "100.0% [0.0, 100.0] | 50.0% [0.0, 100.0] |") in text
    assert "| SCOPE+GRPO | 40 | 40.0% [30.0, 50.0] | -5.0 pp | – | 20.0% [10.0, 30.0] | 10.0% [0.0, 20.0] |" in text
    assert f"- {TARGET}: met" in text
    print_table(s)
    printed = capsys.readouterr().out
    assert "[demo] NQ-Swap (outside benchmark)" in printed and "EM (orig. passage)" in printed
    main = _summary()
    del main["nq_swap"]  # the main job's summary
    text = write_report(main, tmp_path).read_text()
    assert "**Not run** (`real.nq_swap_questions=0`, the main job's default, or `real.split=dev`)" in text
    assert f"- {TARGET}: not run" in text
    print_table(main)
    assert "[demo] NQ-Swap" not in capsys.readouterr().out.split("[demo] targets")[0]


def test_the_nq_swap_stages_run_on_the_tiny_model_and_an_arm_reads_the_base_s_labels(tmp_path):
    """The demo's own NQ-Swap stages (the rows step, the base's evaluation with its estimate, an arm's evaluation
    given the base's knowledge.jsonl) run by the stage runner on the tiny model: the rows are the setting's size, the
    base writes its labels, and the arm's metrics are split by them (the arm here is the same model, no adapter)."""
    from collections import Counter

    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from demos.real import nq_swap
    from recipe_utils import CONF, reset_accelerate
    from recipes.chain import compose as compose_recipe
    from recipes.stage_recipes import runners
    from recipes.stages import StageRunner
    from trainer.runtime.stage import Stage

    cfg = _compose([f"out={tmp_path}", "real.nq_swap_questions=2", "real.stages.evaluate=['generation.batch_size=8']"])
    arm = nq_swap.evaluation(cfg, "scope", adapter="scope")[0]
    arm = Stage(arm.name, arm.recipe, arm.overrides, inputs={k: v for k, v in arm.inputs.items() if k != "adapter_path"})
    plan = [Stage("convert", call=lambda out: "tiny"), *nq_swap.rows_stage(cfg), *nq_swap.evaluation(cfg, "base"), arm]
    reset_accelerate()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        got = StageRunner(tmp_path, seed=0, compose=compose_recipe, runners=runners(("evaluate",))).run_all(plan)
    assert (got["nqswap_rows"]["items"], got["nqswap_rows"]["rows"]) == (2, 8)
    labels = [json.loads(x) for x in (tmp_path / "stages" / "nqswap_base" / "knowledge.jsonl").read_text().splitlines()]
    assert len(labels) == 2
    base, scope = got["nqswap_base"]["nq_swap"], got["nqswap_scope"]["nq_swap"]
    assert scope["knowledge_source"].startswith("the rows' knowledge labels") and scope["n_items"] == 2
    assert {k: v["n_items"] for k, v in scope["by_knowledge"].items()} == {
        k: v["n_items"] for k, v in base["by_knowledge"].items()} == dict(Counter(r["knowledge"] for r in labels))
