"""Every config under conf/ composes against its schema and validates; bad keys/values fail early."""

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from recipe_utils import CONF, compose
from selectrust.core.errors import ConfigError
from trainer.config import (validate_common, validate_distill, validate_dpo, validate_grpo, validate_sft)

PRIMARIES = {"dpo": validate_dpo, "sft": validate_sft, "grpo": validate_grpo,
             "evaluate": validate_common, "mine_pairs": validate_common, "distill": validate_distill}
# Recipe files belong to the trainer whose algo group they configure.
RECIPE_OWNER = {"aime_": "grpo", "grpo_": "grpo", "webshop_": "grpo", "box2_sft": "sft", "taste_": "distill",
                "opsd_": "distill"}


def _recipes():
    return sorted(p.stem for p in (CONF / "recipe").glob("*.yaml"))


def _owner(recipe: str) -> str:
    for prefix, owner in RECIPE_OWNER.items():
        if recipe.startswith(prefix):
            return owner
    text = (CONF / "recipe" / f"{recipe}.yaml").read_text()
    if "recipes/chain.py" in text.split("\n", 2)[1]:
        return "chain"
    for owner in ("grpo", "sft"):
        if f"/{owner}.yaml" in text or f"recipes/{owner}.py" in text:
            return owner
    return "dpo"


@pytest.mark.parametrize("primary", sorted(PRIMARIES))
def test_primary_composes_and_validates(primary):
    cfg = compose(primary)
    OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    PRIMARIES[primary](cfg)


@pytest.mark.parametrize("recipe", _recipes())
def test_every_recipe_file_composes(recipe):
    owner = _owner(recipe)
    if owner == "chain":  # a chain recipe: every stage's own config composes and validates
        from hydra import initialize_config_dir

        from recipe_utils import load_recipe

        cfg = compose("chain", [f"recipe={recipe}", "common=['data.train_path=/data/x.jsonl']"])
        with initialize_config_dir(config_dir=str(CONF), version_base=None):  # the stages compose their configs
            _, stages = load_recipe("chain").chain_runner(cfg)
        assert [s.start for s in stages][1:] == list(cfg.stages)[:-1]
        return
    cfg = compose(owner, [f"recipe={recipe}", "data.train_path=/data/x.jsonl"])
    OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    PRIMARIES[owner](cfg)


@pytest.mark.parametrize("group", sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name != "recipe"))
def test_every_group_option_composes_somewhere(group):
    """Each option of each group composes into at least one primary config."""
    for option in sorted(p.stem for p in (CONF / group).glob("*.yaml")):
        errors = []
        for primary in PRIMARIES:
            try:
                cfg = compose(primary, [f"{group}={option}"])
                OmegaConf.to_container(cfg, resolve=True)
                break
            except Exception as e:  # noqa: BLE001 - collect and report
                errors.append(f"{primary}: {type(e).__name__}: {str(e).splitlines()[0]}")
        else:
            pytest.fail(f"{group}/{option}.yaml composes into no primary config:\n" + "\n".join(errors))


def test_scope_paper_defaults():
    cfg = compose("dpo", ["recipe=scope_qwen3_4b", "data.train_path=/x.jsonl"])
    assert cfg.algo.beta == 0.1 and cfg.optim.lr == 5e-6 and cfg.optim.scheduler == "cosine"
    assert cfg.optim.warmup_ratio == 0.1 and cfg.trainer.max_steps == 300
    assert cfg.optim.batch_size == 4 and cfg.optim.grad_accum == 8
    assert cfg.model.lora.r == 64 and cfg.model.lora.alpha == 128
    assert cfg.trainer.mixed_precision == "bf16" and cfg.seed == 0
    assert cfg.data.max_prompt_len + cfg.data.max_completion_len == 4096
    assert (cfg.algo.lambda_m, cfg.algo.lambda_c, cfg.algo.lambda_p, cfg.algo.rho) == (0.25, 0.25, 0.5, 0.5)


def test_taste_paper_settings():
    cfg = compose("distill", ["recipe=taste_qwen3_4b", "data.train_path=/x.jsonl", "data.eval_path=/y.jsonl"])
    validate_distill(cfg)
    a = cfg.algo
    assert (cfg.model.lora.r, cfg.model.lora.alpha) == (16, 32) and cfg.model.path == "Qwen/Qwen3-4B"
    assert (a.teacher_temperature, a.max_reasoning_tokens, a.min_reasoning_tokens) == (1.0, 3072, 32)
    assert (a.topk, a.topk_support, a.max_positions, a.calibration_temperature) == (100, "student", 512, 2.0)
    assert (a.token_kl_weight, a.choice_kl_weight, a.teacher) == (1.0, 1.0, "initial")
    stage2 = compose("distill", ["recipe=taste_qwen3_4b", "data.train_path=/x.jsonl", *cfg.pipeline.stage2])
    assert stage2.algo.stage == "calibration" and stage2.optim.lr == 1e-5 and stage2.trainer.epochs_cap == 1


@pytest.mark.parametrize("overrides, message", [
    (["algo.teacher_cache=true"], "teacher_cache"),
    (["data.source=files"], "data.train_path"),
    (["algo.choice_tokens=[A]"], "choice_tokens"),
])
def test_distill_semantic_errors(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate_distill(compose("distill", overrides))


def test_misspelt_key_fails_at_compose():
    with pytest.raises(Exception, match="lamda_m"):
        compose("dpo", ["algo.lamda_m=0.3"])


def test_wrong_type_fails_at_compose():
    with pytest.raises(Exception, match="beta"):
        compose("dpo", ["algo.beta=high"])


@pytest.mark.parametrize("overrides, message", [
    (["algo.lambda_m=0.5"], "must sum to 1"),
    (["algo.rho=1.5"], r"algo.rho=1.5 must be in \[0, 1\]"),
    (["model.path=/no/such/model"], "model.path"),
])
def test_semantic_errors_before_model_load(overrides, message):
    cfg = compose("dpo", overrides)
    with pytest.raises((ConfigError, FileNotFoundError), match=message):
        validate_dpo(cfg)


def test_missing_mandatory_value_is_reported():
    cfg = compose("dpo", ["recipe=scope_qwen3_4b"])
    with pytest.raises(Exception, match="train_path"):
        OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)


def test_every_schema_field_has_help():
    from dataclasses import fields, is_dataclass

    from demos.config import register
    from trainer.config import SCHEMAS

    register()  # the demo's schema lives in its package
    assert "demo_schema" in SCHEMAS

    def walk(cls, prefix=""):
        for f in fields(cls):
            t = f.default_factory() if callable(getattr(f, "default_factory", None)) and \
                f.default_factory.__name__ != "_HAS_DEFAULT_FACTORY_CLASS" else None
            if t is not None and is_dataclass(t):
                yield from walk(type(t), prefix + f.name + ".")
            else:
                yield prefix + f.name, f.metadata.get("help")

    missing = [k for cls in SCHEMAS.values() for k, h in walk(cls) if not h]
    assert not missing, f"schema fields without help text: {missing}"


@pytest.mark.parametrize("primary, override", [
    ("dpo", "algo.weighting=both"), ("dpo", "optim.scheduler=step"), ("dpo", "algo.pairing=paired"),
    ("dpo", "algo.reference=frozen"), ("dpo", "data.truncation=middle"), ("dpo", "data.on_invalid=skip"),
    ("dpo", "model.dtype=float64"), ("dpo", "model.init_adapter_mode=stack"), ("dpo", "trainer.device=gpu"),
    ("dpo", "trainer.mixed_precision=fp8"), ("grpo", "data.train_family=box3"), ("dpo", "logger.kind=tensorboard"), ("sft", "algo.aggregation=sum"),
    ("grpo", "algo.aggregation=sum"), ("grpo", "algo.std_scaling=global"), ("grpo", "algo.is_correction=both"),
    ("evaluate", "eval.family=gsm8k"), ("evaluate", "generation.backend=vllm"), ("evaluate", "eval.med.judge=gpt"),
    ("distill", "algo.topk_support=both"), ("distill", "algo.mode=offline"), ("distill", "data.prompt_style=long"),
    ("evaluate", "eval.med.formats=[mc,essay]"), ("evaluate", "eval.med.mitigations=[prior,pray]"),
])
def test_wrong_choice_fails_at_compose_naming_key_and_choices(primary, override):
    key, value = override.split("=")
    with pytest.raises(Exception, match=key) as err:
        compose(primary, [override])
    message = f"{err.value} {err.value.__cause__}"  # Hydra's "Error merging override", then OmegaConf's reason
    assert f"Invalid value '{value.strip('[]').split(',')[-1]}', expected one of" in message


def test_choice_fields_compare_format_and_save_as_plain_strings(tmp_path):
    """A choice is a str Enum: ``==``/dict lookups/f-strings/json see the plain name, config.yaml holds the
    plain name, and a saved config compares equal to the live one (resume's config check)."""
    import json

    from trainer.config import Aggregation, Choice
    from trainer.runtime.run_dir import config_differences

    cfg = compose("grpo", ["algo.aggregation=sequence_mean", "eval.med.formats=[free]"])
    a = cfg.algo.aggregation
    assert isinstance(a, Choice) and a is Aggregation.sequence_mean
    assert a == "sequence_mean" and a != "token_mean" and {"sequence_mean": 1}[a] == 1
    assert f"{a}|{a:>14}|{a!r}" == "sequence_mean| sequence_mean|'sequence_mean'" and str(a) == "sequence_mean"
    assert json.loads(json.dumps(OmegaConf.to_container(cfg.algo)))["aggregation"] == "sequence_mean"
    (tmp_path / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    assert "aggregation: sequence_mean\n" in (tmp_path / "config.yaml").read_text()
    saved = OmegaConf.to_container(OmegaConf.load(tmp_path / "config.yaml"), resolve=True)
    assert saved["eval"]["med"]["formats"] == ["free"]
    assert config_differences(saved, OmegaConf.to_container(cfg, resolve=True)) == []
    changed = OmegaConf.to_container(compose("grpo", ["eval.med.formats=[free]"]), resolve=True)
    assert config_differences(saved, changed) == ["algo.aggregation: saved 'sequence_mean' != now 'token_mean'"]


def test_choices_come_from_the_tuples_the_code_checks():
    from eval_hooks.families import FAMILIES
    from selectrust.conditions import MED_MITIGATIONS
    from trainer.algos.grpo import AGGREGATIONS, STD_SCALINGS
    from eval_hooks.families.med import MedMitigation  # the family's own settings declare their choices
    from trainer.config import Aggregation, Family, StdScaling, Truncation
    from trainer.data.choices import TRUNCATIONS

    for enum, values in ((Aggregation, AGGREGATIONS), (StdScaling, STD_SCALINGS), (Family, tuple(FAMILIES)),
                         (Truncation, TRUNCATIONS), (MedMitigation, MED_MITIGATIONS)):
        assert tuple(m.value for m in enum) == values


def test_removed_dead_keys_are_unknown():
    """eval.batch_size was never read (the HF backend batches by generation.batch_size): it is gone."""
    with pytest.raises(Exception, match="batch_size"):
        compose("evaluate", ["eval.batch_size=8"])
    assert compose("evaluate", ["eval=taste"]).generation.batch_size == 32


def test_resume_tolerates_keys_added_since_the_run_at_their_defaults():
    """A run saved before a key existed resumes when the key is at its schema default; a non-default value of a
    new key, and a key that is gone now (removed or renamed), are still reported."""
    from trainer.runtime.run_dir import config_differences, schema_defaults

    cfg = compose("dpo", [])
    defaults = schema_defaults(cfg)
    assert defaults is not None and defaults["trainer"]["spike_ema_decay"] == 0.9
    current = OmegaConf.to_container(cfg, resolve=True)
    old = OmegaConf.to_container(cfg, resolve=True)
    del old["trainer"]["spike_ema_decay"]  # the run started before this key existed
    del old["prompt"]  # ... and before this whole group existed
    assert config_differences(old, current, defaults=defaults) == []
    assert config_differences(old, current) == ["prompt: saved '<absent>' != now " + repr(current["prompt"]),
                                                "trainer.spike_ema_decay: saved '<absent>' != now 0.9"]
    changed = OmegaConf.to_container(compose("dpo", ["trainer.spike_ema_decay=0.5"]), resolve=True)
    assert config_differences(old, changed, defaults=defaults) == ["trainer.spike_ema_decay: saved '<absent>' != now 0.5"]
    old["model"]["use_chat_template"] = True  # a key that no longer exists
    assert config_differences(old, current, defaults=defaults) == ["model.use_chat_template: saved True != now '<absent>'"]
