"""SCOPE's OPSD baseline on the toy MIST task (recipe=opsd_tiny, docs/scope.md#opsd): the views, the config,
and (slow) the pipeline end to end."""

import json

import pytest

from recipe_utils import CONF, ROOT, compose, load_recipe, reset_accelerate

TOY_TRAIN = "toy:0/mist_train.jsonl"


def _opsd_cfg(*extra):
    return compose("distill", ["recipe=opsd_tiny", *extra])


def _mist_rows(path):
    from eval_hooks import load_rows
    from trainer.data.train_data import resolve_data_path

    return load_rows("mist", resolve_data_path(path))


def test_views_are_the_misleading_and_clean_evaluation_prompts(tiny_tokenizer):
    """Student prompt = the item's misleading row as the matched evaluation renders it, teacher prompt = its
    clean row; the ids the trainer renders equal the ids the evaluation backend generates from."""
    from omegaconf import OmegaConf

    from eval_hooks.evaluate import build_requests
    from selectrust.generation.prompts import PromptSettings, request_prompt_ids
    from trainer.distill.views import load_mist_views, load_views
    from trainer.distill.steps import DistillSteps

    views = load_mist_views(TOY_TRAIN)
    rows = _mist_rows(TOY_TRAIN)
    by = {(r["item_id"], r["condition"]): r for r in rows}
    assert len(views) == len({r["item_id"] for r in rows}) == len(rows) // 4
    for v in views:
        assert v.student_prompt == by[(v.item_id, "misleading")]["prompt"]
        assert v.teacher_prompt == by[(v.item_id, "clean")]["prompt"]
        assert v.gold == str(by[(v.item_id, "clean")]["gold"]) and v.condition == "misleading"
        assert v.student_prompt != v.teacher_prompt
    assert [v.view_id for v in load_views(TOY_TRAIN, style="mist", demonstration="")] == [v.view_id for v in views]

    cfg = _opsd_cfg()
    settings = PromptSettings.from_config(cfg.prompt)
    steps = DistillSteps(cfg, model=None, tokenizer=tiny_tokenizer, prompt=settings, reference=None, answer_ids=[],
                         choice_ids=[], device="cpu")
    assert not steps.has_choice
    evaluate_cfg = compose("evaluate", [])
    assert OmegaConf.to_container(evaluate_cfg.prompt) == OmegaConf.to_container(cfg.prompt)
    v = views[0]
    reqs = build_requests([by[(v.item_id, "misleading")], by[(v.item_id, "clean")]], prompt_settings=settings)
    eval_ids = [request_prompt_ids(tiny_tokenizer, settings, messages=r.messages) for r in reqs]
    assert steps.prompt_ids(v, teacher=False) == eval_ids[0]
    assert steps.prompt_ids(v, teacher=True) == eval_ids[1]


def test_bad_mist_input_names_file_line_and_field(tmp_path):
    from selectrust.core.io import DataError
    from trainer.data.train_data import resolve_data_path
    from trainer.distill.views import load_mist_views

    lines = open(resolve_data_path(TOY_TRAIN)).read().splitlines()[:8]
    bad = tmp_path / "mist.jsonl"
    bad.write_text("\n".join(lines[:5]) + "\n")  # the second item has only its clean row
    with pytest.raises(DataError) as e:
        load_mist_views(bad)
    assert e.value.path == str(bad) and e.value.line == 5 and e.value.field == "condition"
    rec = json.loads(lines[1])
    del rec["prompt"]
    bad.write_text("\n".join([lines[0], json.dumps(rec), *lines[2:4]]) + "\n")
    with pytest.raises(DataError) as e:
        load_mist_views(bad)
    assert e.value.line == 2 and e.value.field == "prompt"


def test_opsd_tiny_composes_and_validates():
    from trainer.config import validate_distill

    cfg = _opsd_cfg("trainer.run_dir=/tmp/x")
    validate_distill(cfg)
    assert (cfg.pipeline.kind, cfg.data.source, cfg.data.prompt_style) == ("opsd", "files", "mist")
    assert (cfg.algo.mode, cfg.algo.teacher, cfg.algo.stage, cfg.algo.choice_kl_weight) == ("on_policy", "initial",
                                                                                           "kl", 0.0)
    assert (cfg.model.lora.r, cfg.model.lora.alpha, cfg.optim.batch_size) == (16, 32, 32)


@pytest.mark.parametrize("override, needle", [
    ("algo.choice_kl_weight=1.0", "algo.choice_kl_weight=0"),
    ("algo.mode=teacher_tokens", "algo.mode=on_policy"),
    ("algo.stage=calibration", "algo.stage=kl"),
    ("data.prompt_style=taste", "data.prompt_style=mist"),
    ("data.eval_path=x.jsonl", "data.eval_path"),
])
def test_opsd_config_errors_are_explicit(override, needle):
    from selectrust.core.errors import ConfigError
    from trainer.config import validate_distill

    with pytest.raises(ConfigError, match=needle.replace(".", r"\.")):
        validate_distill(_opsd_cfg(override))


def test_mist_style_outside_the_toy_is_validated_too():
    from selectrust.core.errors import ConfigError
    from trainer.config import validate_distill

    cfg = compose("distill", ["algo=opsd", "data.prompt_style=mist", f"data.train_path={TOY_TRAIN}",
                              "model.lora.enabled=true"])
    with pytest.raises(ConfigError, match="choice_kl_weight"):
        validate_distill(cfg)


def test_the_files_pipeline_refuses_mist_views_with_a_pointer(tmp_path):
    """recipes/distill.py's taste pipeline (pipeline.kind=taste) evaluates taste forks: MIST views get a clear error."""
    from selectrust.core.errors import ConfigError

    cfg = compose("distill", ["recipe=opsd_tiny", "pipeline.kind=taste", f"data.train_path={TOY_TRAIN}",
                              f"trainer.run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match="use pipeline.kind=opsd.*script: distill"):
        load_recipe("distill").pipeline(cfg, overrides=[])


@pytest.mark.parametrize("pipeline_kind", ["opsd", "taste"])
def test_the_old_data_source_spelling_points_to_the_pipeline_kind(tmp_path, pipeline_kind):
    """OPSD was ``data.source=mist``; it is ``pipeline.kind=opsd`` now, and the old spelling says so before
    anything runs, whichever pipeline it lands in."""
    from selectrust.core.errors import ConfigError

    cfg = compose("distill", ["recipe=opsd_tiny", "data.source=mist", f"pipeline.kind={pipeline_kind}",
                              f"trainer.run_dir={tmp_path}"])
    with pytest.raises(ConfigError, match=r"data\.source=mist: OPSD is a pipeline kind.*use pipeline\.kind=opsd"):
        load_recipe("distill").pipeline(cfg, overrides=[])
    assert not list(tmp_path.iterdir())  # nothing ran


def test_the_pipeline_kind_picks_the_pipeline(monkeypatch, tmp_path):
    """recipes/distill.py runs the OPSD pipeline for pipeline.kind=opsd (recipe=opsd_tiny) and the taste
    pipeline otherwise (the pipelines' own runs are stubbed: only the choice is under test)."""
    import recipes.pipelines.taste_distill as taste
    import recipes.pipelines.opsd as opsd

    monkeypatch.setattr(opsd.OpsdPipeline, "run", lambda self: {"ran": "opsd"})
    monkeypatch.setattr(taste.DistillPipeline, "run", lambda self: {"ran": "taste"})
    pipeline = load_recipe("distill").pipeline
    assert pipeline(_opsd_cfg(f"trainer.run_dir={tmp_path}"), overrides=[])["ran"] == "opsd"
    assert pipeline(_opsd_cfg(f"trainer.run_dir={tmp_path}", "pipeline.kind=taste"), overrides=[])["ran"] == "taste"


def test_the_opsd_pipeline_kind_needs_what_it_evaluates():
    from selectrust.core.errors import ConfigError
    from trainer.config import validate_distill

    with pytest.raises(ConfigError, match=r"pipeline\.kind=opsd: pipeline\.eval_sets"):
        validate_distill(_opsd_cfg("pipeline.eval_sets=[]"))
    with pytest.raises(ConfigError, match=r"pipeline\.kind=opsd trains on MIST views.*prompt_style=mist"):
        validate_distill(_opsd_cfg("data.prompt_style=taste", "algo.choice_kl_weight=0"))


def test_base_and_evaluation_are_the_demos():
    """The OPSD base is the demo's base SFT and its evaluation the demo's (so the numbers compare at a seed)."""
    from omegaconf import OmegaConf

    demo = OmegaConf.load(CONF / "demo.yaml").toy.stages
    recipe = OmegaConf.load(CONF / "recipe" / "opsd_tiny.yaml").pipeline
    assert list(recipe.base_sft) == list(demo.base_sft)
    assert recipe.base_model == demo.model
    assert list(recipe.evaluate) == list(demo.evaluate)
    sets = OmegaConf.to_container(recipe, resolve=False)["eval_sets"]  # toy:${seed}/... resolve at the root
    assert sets[0] == "toy:${seed}/mist_heldout.jsonl"


@pytest.mark.slow
def test_opsd_tiny_end_to_end(tmp_path):
    """recipe=opsd_tiny seed=0: summary.json with the 4 accuracies, overall and SC2W of base and student;
    OPSD lowers SC2W below the base's (it did on seeds 0, 1 and 2, docs/scope.md#opsd)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainer.config import register_schemas

    register_schemas()
    reset_accelerate()
    GlobalHydra.instance().clear()
    over = ["recipe=opsd_tiny", "pipeline.eval_sets=['toy:${seed}/mist_heldout.jsonl']"]
    with initialize_config_dir(config_dir=str(CONF), version_base=None):  # the stages compose their configs too
        cfg = hydra_compose(config_name="distill", overrides=[*over, f"trainer.run_dir={tmp_path}", "seed=0"])
        summary = load_recipe("distill").pipeline(cfg, overrides=over[:1])  # stages: the command line less pipeline.*
    saved = json.loads((tmp_path / "summary.json").read_text())
    assert saved == json.loads(json.dumps(summary))
    for arm in ("base", "opsd"):
        for k in ("clean", "misleading", "correct", "irrelevant", "overall", "sc2w"):
            assert 0.0 <= saved[arm][k] <= 1.0, (arm, k)
        assert saved[arm] == saved["mist_heldout"][arm]
    assert saved["wall_seconds"] > 0
    assert (tmp_path / "report.md").read_text().startswith("# OPSD")
    assert saved["opsd"]["sc2w"] < saved["base"]["sc2w"]
    metrics = [json.loads(x) for x in (tmp_path / "stages" / "opsd" / "metrics.jsonl").read_text().splitlines()]
    assert any("token_kl" in m for m in metrics)
