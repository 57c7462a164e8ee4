"""The real demo's arm registry (demos/real/arms.py): one entry per arm, checked before any stage runs; the
override order of its training stages; the declared inputs of its step stages (recipes/stages/)."""

from __future__ import annotations

import copy
import json

import pytest

from demos.real.arms import DemoArm, dpo
from test_real_demo import _compose, _facts_rows, _metrics, _ratio, _summary

# An arm from elsewhere (registered in code, or named by an entry point of the group selectrust.demo_arms), and
# broken ones.
EXTRA = DemoArm("extra_arm", "extra", "#937860", train=dpo("scope"), comparison=True, pools="the extra pools",
                note="{label} is the extra arm.")
NO_POOLS = DemoArm("extra_arm", "extra", "#000000", train=dpo("scope"))  # a DPO arm the report could not describe
BAD_COLOUR = DemoArm("extra_arm", "extra", "blurple", train=dpo("scope"))
BAD_SWITCH = DemoArm("extra_arm", "extra", "#000000", train=dpo("scope"), switch="extra_arm")
BEFORE_ITS_START = DemoArm("extra_arm", "extra", "#000000", train=dpo("scope"), continues="misleading_only")


def test_every_arm_is_one_entry_in_run_and_report_order():
    from demos.real.arms import ARMS, arm_on, color, label, trained

    assert list(ARMS) == ["base", "scope", "misleading_only", "knowledge_aware", "scope_grpo", "scope_grpo_sft",
                          "ka_grpo"]
    assert [label(n) for n in ARMS] == ["base", "SCOPE", "misleading-only", "knowledge-aware", "SCOPE+GRPO",
                                        "SCOPE+GRPO+SFT", "knowledge-aware+GRPO"]
    assert len({color(n) for n in ARMS}) == len(ARMS)
    assert [n for n in ARMS if not trained(n)] == ["base"]
    main, full = _compose([]), _compose(["demo=real_full"])
    # the main job: the arm chosen on dev (ka_grpo) and the arm it continues; SCOPE by its demo's own switch, off
    assert [n for n in ARMS if trained(n) and arm_on(main, n)] == ["knowledge_aware", "ka_grpo"]
    assert arm_on(_compose(["real.scope=true"]), "scope") and not arm_on(_compose(["real.scope=true"]), "scope_grpo")
    assert not arm_on(_compose(["real.ka_grpo=false"]), "ka_grpo")  # the user's switch wins over the demo's own
    # the full experiment: every comparison arm; the SFT-term arm only when switched on
    assert [n for n in ARMS if arm_on(full, n)] == ["base", "scope", "misleading_only", "knowledge_aware", "scope_grpo",
                                                    "ka_grpo"]
    assert arm_on(_compose(["real.scope_grpo_sft=true"]), "scope_grpo_sft")
    assert arm_on(_compose(["demo=real_full", "real.scope_grpo_sft=null"]), "scope_grpo_sft")  # null: comparison arms


def test_an_unknown_arm_name_fails_in_one_line():
    from demos.real.arms import ARMS
    from selectrust.core.errors import ConfigError

    with pytest.raises(ConfigError, match=r"^unknown demo arm 'scope_rl'; known: base \| scope \|") as e:
        ARMS.get("scope_rl")
    assert "\n" not in str(e.value)


def test_a_sixth_arm_is_one_entry_and_runs_reports_and_plots(tmp_path):
    """An arm registered in code (or by an entry point: the next test) trains, is evaluated, tabled and plotted in
    its own colour (before the registry, a sixth arm's plot colour was a KeyError once every stage had run)."""
    from demos.real.arms import ARMS
    from demos.real.pipeline import arms, stages
    from demos.real.report import check_targets, write_report
    from demos.real.seeds import main as seeds_main

    ARMS.register("extra_arm", EXTRA)
    try:
        full = _compose([f"out={tmp_path}", "demo=real_full"])
        assert [s.name for s in stages(full)][-4:] == ["extra_arm", "eval_extra_arm", "transfer_extra_arm",
                                                       "nqswap_extra_arm"]  # NQ-Swap too, in the full experiment
        assert arms(full)[-1] == "extra_arm" and "extra_arm" not in arms(_compose([]))  # a comparison arm
        s = _summary()
        s["real"]["extra_arm"] = _metrics((0.50, 0.55, 0.90, 0.30), 0.35, 44, 0.80)
        s["training"] = {"scope": {"recipe": "dpo", "algo": "scope", "steps": 3},
                         "extra_arm": {"recipe": "dpo", "algo": "scope", "steps": 3}}
        s["targets"] = check_targets(s)
        text = write_report(s, tmp_path).read_text()
        assert "| knowledge-aware | SCOPE+GRPO | extra |" in text
        # what the report says of an arm is its entry's: the pools it trained on and its note
        assert "Every DPO arm trains on this one pairs file: SCOPE on the four balanced pools, extra on the extra " \
               "pools." in text and "extra is the extra arm." in text
        assert (tmp_path / "real_tradeoff.png").stat().st_size > 0
        run = tmp_path / "s0"
        run.mkdir()
        (run / "summary.json").write_text(json.dumps(s))
        (run / "demo.json").write_text(json.dumps({"demo": "real", "seed": 0, "settings": {"real": {}}}))
        seeds_main([str(run), "--out", str(tmp_path / "seeds"), "--no-pooled"])
        assert "| 0 | extra |" in (tmp_path / "seeds" / "seed_table.md").read_text()
    finally:
        ARMS.unregister("extra_arm")


def test_an_arm_from_an_entry_point_is_found_and_a_broken_one_fails_before_any_stage(tmp_path, monkeypatch):
    from importlib.metadata import EntryPoint

    import selectrust.core.plugins as plugins
    from demos.real.arms import ARMS, GROUP
    from demos.real.pipeline import stages
    from selectrust.core.errors import PluginError
    from selectrust.core.errors import ConfigError

    def installed(value: str):
        def entry_points(group: str):
            return [EntryPoint("extra_arm", value, group)] if group == GROUP else []
        return entry_points

    (tmp_path / "arm_raising_xyz.py").write_text("raise RuntimeError('arm import boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    full = [f"out={tmp_path}", "demo=real_full", "real.misleading_only=false"]
    loaded = {k: v for k, v in ARMS.loaded.items() if k != "extra_arm"}
    broken = r"^demo arm plugin 'extra_arm' cannot be used: "
    for value, error in (("demos.real.arms:SCOPE", broken + r".*its entry is named 'scope'"),
                         ("demos.real.arms:TRAIN_COMMON", broken + r".*\['eval=none'.* is not a "),
                         ("no_such_module_xyz:ARM", broken + r"importing no_such_module_xyz:ARM failed: "
                                                             r"ModuleNotFoundError.* in group selectrust.demo_arms"),
                         ("arm_raising_xyz:ARM", broken + r"importing arm_raising_xyz:ARM failed: RuntimeError: arm "
                                                          r"import boom .* in group selectrust.demo_arms"),
                         ("test_demo_arms:BAD_COLOUR", r"^demo arm 'extra_arm': colour 'blurple' is not a"),
                         ("test_demo_arms:BAD_SWITCH", r"^demo arm 'extra_arm': its switch real.extra_arm is not"),
                         ("test_demo_arms:BEFORE_ITS_START",
                          r"^demo arm 'extra_arm' continues 'misleading_only', which this run does not train"),
                         ("test_demo_arms:NO_POOLS", r"^demo arm 'extra_arm' trains with dpo but names no `pools`")):
        monkeypatch.setattr(plugins, "entry_points", installed(value))
        monkeypatch.setattr(ARMS, "installed", None)
        monkeypatch.setattr(ARMS, "loaded", dict(loaded))
        monkeypatch.setattr(ARMS, "failed", {})
        with pytest.raises((ConfigError, PluginError), match=error) as e:
            stages(_compose(full))
        assert "\n" not in str(e.value)
    monkeypatch.setattr(plugins, "entry_points", installed("test_demo_arms:EXTRA"))
    monkeypatch.setattr(ARMS, "installed", None)
    monkeypatch.setattr(ARMS, "loaded", dict(loaded))
    assert [s.name for s in stages(_compose(full))][-4:] == ["extra_arm", "eval_extra_arm", "transfer_extra_arm",
                                                            "nqswap_extra_arm"]


def test_override_sources_merge_in_one_documented_order():
    from demos.real.arms import OVERRIDE_ORDER, merge_overrides

    assert OVERRIDE_ORDER == ("recipe", "demo", "stage", "common", "arm", "arm_stage")
    assert merge_overrides(arm_stage=["f=1"], common=["d=1"], recipe=["a=1"], arm=["e=1"], stage=["c=1"],
                           demo=["b=1"]) == ["a=1", "b=1", "c=1", "d=1", "e=1", "f=1"]
    assert merge_overrides(stage=["x=2"], demo=["x=1"]) == ["x=1", "x=2"]  # the user's stage overrides win
    with pytest.raises(TypeError, match="unknown override source"):
        merge_overrides(user=["x=1"])


def test_the_users_grpo_overrides_win_over_the_demos_own(tmp_path):
    """Composed: ``real.stages.grpo`` (stage) comes after the main job's SCOPE+GRPO steps (demo), so it wins; the
    arm's own overrides (its prompt rows' format) come after both."""
    from demos.real.pipeline import stages
    from recipes.chain import compose as compose_recipe
    from recipes.stages import StageRunner

    def grpo_cfg(extra: list[str]):
        from hydra import initialize_config_dir
        from hydra.core.global_hydra import GlobalHydra

        from recipe_utils import CONF

        stage = next(s for s in stages(_compose([f"out={tmp_path}", "real.scope=true", "real.scope_grpo=true", *extra]))
                     if s.name == "scope_grpo")
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF), version_base=None):
            return StageRunner(tmp_path, seed=0, compose=compose_recipe, runners={}).compose_stage(stage, planned=True)

    assert grpo_cfg([]).trainer.max_steps == 5
    cfg = grpo_cfg(["real.stages.grpo=['trainer.max_steps=7','data.train_family=mist']"])
    assert cfg.trainer.max_steps == 7 and cfg.data.train_family is None  # the arm's rows format comes last


def test_the_knowledge_aware_arms_full_set_overrides_apply_only_to_the_full_facts_set(tmp_path):
    """``real.stages.knowledge_aware_full`` (the settings chosen on the full set's dev runs) comes after
    ``real.stages.knowledge_aware`` on the full facts set, and not at all on the small one."""
    from demos.real.pipeline import stages

    def ka_overrides(extra: list[str]) -> list[str]:
        stage = next(s for s in stages(_compose([f"out={tmp_path}", *extra])) if s.name == "knowledge_aware")
        return list(stage.overrides)

    ours = ["real.stages.knowledge_aware=['algo.lambda_u=0.2']", "real.stages.knowledge_aware_full=['algo.lambda_u=0.07']"]
    small, full = ka_overrides([*ours, "real.facts_size=small"]), ka_overrides([*ours, "real.facts_size=full"])
    assert small[-1] == "algo.lambda_u=0.2" and "algo.lambda_u=0.07" not in small
    assert full[-2:] == ["algo.lambda_u=0.2", "algo.lambda_u=0.07"]  # the full set's come last and win
    assert ka_overrides(["demo=real_full", *ours])[-1] == "algo.lambda_u=0.07"  # real_full builds the full set


def test_a_step_gets_its_declared_inputs_from_the_runner(tmp_path):
    from recipes.stages import StageRunner
    from trainer.runtime.stage import Stage

    def write(out):
        out.mkdir(parents=True)
        (out / "f.txt").write_text("x")

    seen = {}
    plan = [Stage("a", call=write), Stage("b", call=lambda out, inputs: seen.update(inputs) or "b-done",
                                          inputs={"file": "a/f.txt", "dir": "a"}),
            Stage("c", call=lambda out: "no inputs, called with its directory only")]
    results = StageRunner(tmp_path, seed=0, compose=None, runners={}, log=lambda m: None).run_all(plan)
    assert results["b"] == "b-done" and seen == {"file": tmp_path / "stages" / "a" / "f.txt",
                                                 "dir": str(tmp_path / "stages" / "a")}


def test_grpo_prompts_declares_its_inputs_and_reads_only_them(tmp_path):
    """The stage declares the training facts and ``mine``'s estimate; its step reads the paths handed to it (here
    outside any stages directory), not files next to its own directory."""
    from demos.real.pipeline import stages
    from demos.real.prompts import grpo_prompts
    from selectrust.core.io import write_jsonl_atomic

    stage = next(s for s in stages(_compose([f"out={tmp_path}"])) if s.name == "grpo_prompts")
    assert stage.inputs == {"rows": "facts/facts_train.jsonl", "labels": "mine/knowledge.jsonl"}
    items = {f"i{n}": f"Land{n}" for n in range(4)}
    write_jsonl_atomic(tmp_path / "elsewhere" / "rows.jsonl", _facts_rows(items))
    write_jsonl_atomic(tmp_path / "elsewhere" / "labels.jsonl",
                       [{"item_id": i, "knowledge": "known" if n < 2 else "unknown", "score": 0.5}
                        for n, i in enumerate(items)])
    out = tmp_path / "stages" / "grpo_prompts"
    got = grpo_prompts(0)(out, {"rows": tmp_path / "elsewhere" / "rows.jsonl",
                                "labels": tmp_path / "elsewhere" / "labels.jsonl"})
    assert got == {"known": 2, "unknown": 2, "uncertain": 0, "per_label": 2, "rows": 16}
    assert not (tmp_path / "stages" / "mine").exists()


def test_the_arms_own_targets_come_from_their_entries():
    from demos.real.arms import ARMS
    from demos.real.report import check_targets

    s = copy.deepcopy(_summary())
    names = list(check_targets(s))
    assert names.index("misleading-only correct-context accuracy < SCOPE+GRPO's") < names.index(
        "knowledge-aware unknown_correct_accuracy >= base - 0.05") < names.index(
        "format_compliance >= 0.9 in every arm and condition")
    assert ARMS.get("misleading_only").targets is not None and ARMS.get("scope").targets is None


def test_the_sft_term_and_knowledge_aware_grpo_arms_are_stages_of_the_existing_recipes(tmp_path):
    """Switched on, scope_grpo_sft continues SCOPE's adapter by the GRPO stage with CHORD's SFT term (its own
    overrides last), ka_grpo continues knowledge-aware SCOPE's by the same GRPO stage; all three GRPO arms read the one
    grpo_prompts step, declared once; without knowledge_aware, ka_grpo fails before any stage."""
    from demos.real.arms import SFT_TERM
    from demos.real.pipeline import stages
    from selectrust.core.errors import ConfigError

    over = [f"out={tmp_path}", "real.scope=true", "real.scope_grpo=true", "real.scope_grpo_sft=true",
            "real.ka_grpo=true", "real.knowledge_aware=true",
            "real.stages.scope_grpo_sft=['algo.sft_coef=0.3']"]
    plan = stages(_compose(over))
    names = [s.name for s in plan]
    assert names[names.index("mine") + 1:] == [
        "scope", "eval_scope", "transfer_scope", "knowledge_aware", "eval_knowledge_aware", "transfer_knowledge_aware",
        "grpo_prompts", "scope_grpo", "eval_scope_grpo", "transfer_scope_grpo", "scope_grpo_sft",
        "eval_scope_grpo_sft", "transfer_scope_grpo_sft", "ka_grpo", "eval_ka_grpo", "transfer_ka_grpo"]
    by = {s.name: s for s in plan}
    grpo, sft, ka = by["scope_grpo"], by["scope_grpo_sft"], by["ka_grpo"]
    assert [(s.recipe, s.start, s.init_mode) for s in (grpo, sft, ka)] == [
        ("grpo", "scope", "continue"), ("grpo", "scope", "continue"), ("grpo", "knowledge_aware", "continue")]
    assert sft.overrides == [*grpo.overrides, *SFT_TERM, "algo.sft_coef=0.3"]  # the user's own last
    assert SFT_TERM == ("algo.sft_coef=0.1", "algo.sft_rows=zero_variance_failed")
    # ka_grpo: the GRPO stage's overrides, then its own (conf/demo.yaml's real.stages.ka_grpo, the setting chosen on
    # dev in issue 61: paired rollouts, 20 steps of 8 prompts, after the main job's SCOPE+GRPO 5 of 4, so they win)
    assert ka.overrides[:len(grpo.overrides)] == grpo.overrides and "trainer.max_steps=5" in grpo.overrides
    assert ka.overrides[len(grpo.overrides):] == ["algo.rollout_mode=paired_context", "algo.prompts_per_step=8",
                                                  "trainer.max_steps=20", "optim.batch_size=96", "optim.grad_accum=1"]
    assert grpo.overrides[-1] == "data.train_family=null"  # real.grpo_rows=informative's rows format
    assert sft.inputs == ka.inputs == grpo.inputs == {"data.train_path": "grpo_prompts/prompts.jsonl"}
    assert by["eval_ka_grpo"].inputs["adapter_path"] == "ka_grpo"
    assert by["transfer_scope_grpo_sft"].inputs["eval.knowledge_path"] == "transfer_base/knowledge.jsonl"
    alone = [s.name for s in stages(_compose([f"out={tmp_path}", "real.scope=true", "real.ka_grpo=false",
                                              "real.scope_grpo=false", "real.scope_grpo_sft=true"]))]
    assert alone.count("grpo_prompts") == 1 and alone.index("grpo_prompts") == alone.index("scope_grpo_sft") - 1
    with pytest.raises(ConfigError, match=r"^demo arm 'ka_grpo' continues 'knowledge_aware', which this run does not"):
        stages(_compose([f"out={tmp_path}", "real.ka_grpo=true", "real.knowledge_aware=false"]))


def test_scope_can_be_left_out_of_a_seed_that_runs_the_chosen_arm_alone(tmp_path):
    """real.scope=false (issue 61: SCOPE on five of the ten test seeds): no SCOPE stage, the chosen arm and the base's
    stages as before; an arm that continues SCOPE then fails before any stage."""
    from demos.real.pipeline import stages
    from selectrust.core.errors import ConfigError

    full = [s.name for s in stages(_compose([f"out={tmp_path}", "real.scope=true"]))]
    alone = [s.name for s in stages(_compose([f"out={tmp_path}", "real.scope=false"]))]
    assert alone == [n for n in full if n not in ("scope", "eval_scope", "transfer_scope")] and "scope" in full
    assert "knowledge_aware" in alone and "mine" in alone
    with pytest.raises(ConfigError, match=r"^demo arm 'scope_grpo' continues 'scope', which this run does not"):
        stages(_compose([f"out={tmp_path}", "real.scope=false", "real.scope_grpo=true"]))


def test_an_arm_another_continues_can_be_trained_without_being_evaluated(tmp_path):
    """real.evaluate_continued=false (issue 61's test seeds): knowledge-aware SCOPE is trained as ka_grpo's start, with
    no evaluation stage and no summary entry; an arm nothing continues (SCOPE here) is evaluated as before."""
    from demos.real.arms import evaluated_arms, run_arms
    from demos.real.pipeline import stages

    over = [f"out={tmp_path}", "real.scope=true"]
    every = [s.name for s in stages(_compose(over))]
    cfg = _compose([*over, "real.evaluate_continued=false"])
    lean = [s.name for s in stages(cfg)]
    assert lean == [n for n in every if n not in ("eval_knowledge_aware", "transfer_knowledge_aware")]
    assert "knowledge_aware" in lean and lean.index("knowledge_aware") < lean.index("ka_grpo")
    assert run_arms(cfg) == ["scope", "knowledge_aware", "ka_grpo"] and evaluated_arms(cfg) == ["scope", "ka_grpo"]
    assert evaluated_arms(_compose(over)) == run_arms(cfg)


def test_the_new_arms_stage_configs_compose_and_validate(tmp_path):
    """The GRPO stage of scope_grpo_sft composes with the SFT term set (and passes validate_grpo)."""
    from demos.real.pipeline import stages
    from recipes.chain import compose as compose_recipe
    from trainer.config import validate_grpo
    from recipes.stages import StageRunner

    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from recipe_utils import CONF

    stage = next(s for s in stages(_compose([f"out={tmp_path}", "real.scope=true", "real.scope_grpo_sft=true"]))
                 if s.name == "scope_grpo_sft")
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        cfg = StageRunner(tmp_path, seed=0, compose=compose_recipe, runners={}).compose_stage(stage, planned=True)
    assert (cfg.algo.sft_coef, cfg.algo.sft_rows, cfg.algo.sft_schedule) == (0.1, "zero_variance_failed", "constant")
    validate_grpo(cfg)


def test_the_new_arms_are_held_to_the_checked_arms_targets():
    from demos.real.arms import ARMS
    from demos.real.report import TARGETS, check_targets

    s = copy.deepcopy(_summary())
    base = s["real"]["base"]
    good = copy.deepcopy(base)
    _ratio(good, 0.4)  # the paired SC2W ratio, what the targets check (issue 54)
    s["real"]["scope_grpo_sft"] = good
    got = check_targets(s)
    own = {k: v for k, v in got.items() if k.startswith("SCOPE+GRPO+SFT ")}
    assert own == {"SCOPE+GRPO+SFT paired SC2W <= 0.5 x base": True, "SCOPE+GRPO+SFT clean accuracy >= base - 0.03": True,
                   "SCOPE+GRPO+SFT correct accuracy >= base - 0.03": True,
                   "SCOPE+GRPO+SFT irrelevant accuracy >= base - 0.03": True,
                   "SCOPE+GRPO+SFT unknown_correct_accuracy >= base - 0.05": True}
    bad = copy.deepcopy(good)
    bad["accuracy"]["correct"] -= 0.04
    _ratio(bad, 0.6)
    missed = [k for k, v in ARMS.get("ka_grpo").targets(bad, base, s["real"]["scope_grpo"], "SCOPE+GRPO",
                                                         TARGETS).items() if not v]
    assert missed == ["knowledge-aware+GRPO paired SC2W <= 0.5 x base", "knowledge-aware+GRPO correct accuracy >= base - 0.03"]


def test_the_arm_chosen_on_dev_is_the_checked_arm_when_it_runs():
    """Issue 61's choice (knowledge-aware SCOPE continued by GRPO with paired rollouts, real.ka_grpo=true): when a run
    trains it, the targets are checked on it, else on the arm checked before."""
    from demos.real.report import checked_arm

    s = copy.deepcopy(_summary())
    assert checked_arm(s) == "scope_grpo"
    s["real"]["ka_grpo"] = copy.deepcopy(s["real"]["base"])
    assert checked_arm(s) == "ka_grpo"
