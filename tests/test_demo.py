"""The embedded demo (recipes/demo.py): stages connect and the SCOPE direction holds (reduced, fast),
the full targets hold for several seeds and reruns are identical (slow)."""

import json

import pytest

from recipe_utils import ROOT, load_recipe, reset_accelerate

REDUCED = [
    "stages.base_sft=[algo=sft,model.lora.enabled=false,optim.lr=3.0e-3,optim.batch_size=64,"
    "optim.grad_accum=1,optim.warmup_ratio=0.05,trainer.max_steps=350,trainer.save_every=0,"
    "data.max_prompt_len=96,data.max_completion_len=4]",
    "stages.dpo=[model.lora.r=16,model.lora.alpha=32,optim.lr=2.0e-3,optim.batch_size=32,optim.grad_accum=1,"
    "trainer.max_steps=40,trainer.save_every=0,algo.beta=0.1,data.max_prompt_len=96,data.max_completion_len=4]",
    "stages.box2_sft=[algo=counterfactual_sft,model.lora.enabled=false,optim.lr=1.0e-3,optim.batch_size=32,"
    "optim.grad_accum=1,trainer.max_steps=10,trainer.save_every=0,data.max_completion_len=4]",
    "stages.grpo=[algo.group_size=4,algo.prompts_per_step=8,algo.max_new_tokens=2,optim.lr=1.0e-3,optim.batch_size=32,"
    "optim.grad_accum=1,trainer.max_steps=2,trainer.save_every=0]",
]


def _demo(out, seed=0, extra=()):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainer.config import register_schemas

    register_schemas()
    reset_accelerate()
    GlobalHydra.instance().clear()
    demo = load_recipe("demo")
    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base=None):
        cfg = compose(config_name="demo", overrides=[f"out={out}", f"seed={seed}", *extra])
        return demo.run(cfg)


def test_reduced_demo_stages_connect_and_scope_direction_holds(tmp_path):
    summary = _demo(tmp_path / "demo", extra=["misleading_only=false", *REDUCED])
    on_disk = json.loads((tmp_path / "demo" / "summary.json").read_text())
    assert on_disk["scope"]["base"]["sc2w"] == summary["scope"]["base"]["sc2w"]
    for section, stages in (("scope", ("base", "trained")), ("box2", ("base", "sft", "grpo"))):
        for stage in stages:
            assert "family" in on_disk[section][stage], (section, stage)
    base, scope = summary["scope"]["base"], summary["scope"]["trained"]
    assert summary["mining"]["kept"] > 0
    assert base["sc2w"] is not None and scope["sc2w"] is not None
    assert scope["sc2w"] < base["sc2w"], (base["sc2w"], scope["sc2w"])   # resisting misleading hints improved
    assert scope["accuracy"]["misleading"] > base["accuracy"]["misleading"]
    report = (tmp_path / "demo" / "report.md").read_text()
    assert "What this shows, and what it does not" in report and "demo_conditions.png" in report
    assert (tmp_path / "demo" / "demo_conditions.png").exists()


@pytest.mark.slow
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_full_demo_targets(tmp_path, seed):
    """The issue's targets for three seeds (the default and two others)."""
    s = _demo(tmp_path / f"demo{seed}", seed=seed)
    base, scope, mo = s["scope"]["base"], s["scope"]["trained"], s["scope"]["misleading_only"]
    assert base["sc2w"] >= 0.80
    assert scope["sc2w"] <= 0.15
    assert scope["accuracy"]["clean"] >= 0.90 and scope["accuracy"]["correct"] >= 0.90
    assert abs(s["box2"]["sft"]["delta"]["bad"]) < abs(s["box2"]["base"]["delta"]["bad"])
    assert s["wall_seconds"] <= 600
    (tmp_path.parent / f"ablation_seed{seed}.json").write_text(json.dumps(
        {"scope_correct": scope["accuracy"]["correct"], "mo_correct": mo["accuracy"]["correct"]}))
