"""The embedded demo (recipes/demo.py): stages connect and the SCOPE direction holds (reduced, fast),
the full targets hold for several seeds and reruns are identical (slow)."""

import json

import pytest

from recipe_utils import ROOT, load_recipe, reset_accelerate

# The default stages, shortened where the direction already shows (DPO, Box2 SFT, GRPO); the base SFT
# keeps its default length because mining needs a base that memorised the keys.
def _stage(name: str, *overrides: str) -> str:
    """A Hydra override setting one stage's override list (each element quoted: it contains '=')."""
    return f"stages.{name}=[" + ",".join(f"'{o}'" for o in overrides) + "]"


REDUCED = [
    _stage("dpo", "model.lora.r=16", "model.lora.alpha=32", "optim.lr=3.0e-4", "optim.batch_size=32",
           "optim.grad_accum=1", "trainer.max_steps=150", "trainer.save_every=0", "algo.beta=0.5",
           "data.max_prompt_len=96", "data.max_completion_len=4"),
    _stage("box2_sft", "algo=counterfactual_sft", "model.lora.enabled=false", "optim.lr=1.0e-3",
           "optim.batch_size=32", "optim.grad_accum=1", "trainer.max_steps=10", "trainer.save_every=0",
           "data.max_completion_len=4", "data.group_by_length=true"),
    _stage("grpo", "algo.group_size=4", "algo.prompts_per_step=8", "algo.max_new_tokens=2", "optim.lr=1.0e-3",
           "optim.batch_size=32", "optim.grad_accum=1", "trainer.max_steps=2", "trainer.save_every=0"),
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


def _metrics_only(summary: dict) -> dict:
    return {k: v for k, v in summary.items() if k not in ("wall_seconds", "stage_seconds")}


@pytest.mark.slow
def test_full_demo_three_seeds_direction_ablation_box2_and_determinism(tmp_path):
    """Seeds 0, 1, 2 with the default stages. Checked here: what the demo claims in its report — SCOPE
    lowers SC2W on held-out keys, the misleading-only ablation's correct-context accuracy is below
    SCOPE's on average over the three seeds, counterfactual SFT moves Box2's Δbad towards 0, the whole
    pipeline fits in 10 minutes, and a rerun with the same seed gives identical metrics. (The issue's
    absolute targets SC2W <= 15% and clean/correct >= 90% are not met by this toy; the closing note and
    DEMO.md give the measured numbers.)"""
    runs = {seed: _demo(tmp_path / f"demo{seed}", seed=seed) for seed in (0, 1, 2)}
    for seed, s in runs.items():
        base, scope = s["scope"]["base"], s["scope"]["trained"]
        assert scope["sc2w"] < base["sc2w"], (seed, base["sc2w"], scope["sc2w"])
        assert abs(s["box2"]["sft"]["delta"]["bad"]) < abs(s["box2"]["base"]["delta"]["bad"]), seed
        assert s["wall_seconds"] <= 600, (seed, s["wall_seconds"])
    mean = lambda key: sum(runs[k]["scope"][key]["accuracy"]["correct"] for k in runs) / len(runs)  # noqa: E731
    assert mean("misleading_only") < mean("trained")
    again = _demo(tmp_path / "demo0_again", seed=0)
    assert _metrics_only(again) == _metrics_only(runs[0])
