"""Bounded generation (issue 59 BAD 8): a generation budget (algo.max_new_tokens, eval.max_new_tokens) over the
model's positions less the longest prompt, or a generation batch whose KV cache and logits do not fit in memory, is
one line, exit 2, before any generation (trainer/config/budget.py)."""

from __future__ import annotations

import json
import subprocess

import pytest

import dist_helpers as dh
from recipe_utils import compose
from selectrust.core.errors import ConfigError
from trainer.config.budget import ModelShape, check_generation, generation_bytes, model_shape
from trainer.config.validation import check_generation_budget


def _run(recipe: str, args: list[str], tmp_path) -> subprocess.CompletedProcess:
    env = dh.env(PYTHONPATH=str(dh.REPO))
    env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run(dh.command(recipe, args), env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)


def _line(p: subprocess.CompletedProcess) -> str:
    lines = [l for l in p.stderr.splitlines() if l.strip() and "Warning" not in l and not l.startswith("warning:")
             and "%|" not in l]
    assert p.returncode == 2 and len(lines) == 1 and "Traceback" not in p.stderr, p.stderr[-3000:]
    return lines[0]


@pytest.mark.parametrize("recipe,args,key,value", [
    ("grpo", ["recipe=grpo_tiny", "algo.max_new_tokens=1000000000"], "algo.max_new_tokens", 1000000000),
    ("grpo", ["recipe=grpo_tiny", "algo.max_new_tokens=2000"], "algo.max_new_tokens", 2000),
    ("evaluate", ["eval.max_new_tokens=2000"], "eval.max_new_tokens", 2000),
    ("dpo", ["eval.max_new_tokens=5000"], "eval.max_new_tokens", 5000),
])
def test_a_budget_over_the_models_positions_is_one_line_exit_2_before_any_model_loads(tmp_path, recipe, args, key,
                                                                                   value):
    run_dir = tmp_path / "run"
    p = _run(recipe, [*args, f"trainer.run_dir={run_dir}" if recipe != "evaluate" else f"out_dir={run_dir}"], tmp_path)
    line = _line(p)
    assert line.startswith(f"error: {key}={value} is more than the 1024 positions of the model"), line
    assert "set " + key + " to at most 1024" in line, line
    assert not run_dir.exists()  # refused before the run dir (and before any model) was made


def test_the_longest_prompt_counts():
    cfg = compose("grpo", ["recipe=grpo_tiny", "algo.max_new_tokens=1000"])
    shape = ModelShape(positions=1024, layers=2, kv_heads=2, head_dim=16, vocab=300)
    check_generation_budget(cfg, shape, 24, keys=("algo.max_new_tokens",))  # 1000 + 24 = 1024 fits
    with pytest.raises(ConfigError, match=r"^algo.max_new_tokens=1000 \+ the longest prompt's 25 tokens .* is more "
                                          r"than the 1024 positions .*set algo.max_new_tokens to at most 999$"):
        check_generation_budget(cfg, shape, 25, keys=("algo.max_new_tokens",), prompt_what=" (a GRPO prompt)")


def test_a_round_over_the_available_memory_names_the_keys_to_lower():
    cfg = compose("grpo", ["recipe=grpo_tiny", "algo.max_new_tokens=4096", "algo.oversample_cap=1"])
    shape = ModelShape(positions=32768, layers=32, kv_heads=8, head_dim=128, vocab=150000)
    need = generation_bytes(shape, tokens=4096 + 100, batch=16, dtype="float32")
    assert need == 2 * 32 * 8 * 128 * 4196 * 16 * 4 + 16 * 150000 * 4
    assert check_generation(cfg, shape, 100, available=need) is None
    problem = check_generation(cfg, shape, 100, available=need - 1)
    assert problem.startswith("a GRPO round would need about ") and "lower algo.max_new_tokens or " in problem
    assert "generation.batch_size" in problem and "algo.group_size" in problem and "16 completions" in problem
    cfg = compose("evaluate", ["eval.max_new_tokens=4096", "generation.batch_size=64"])
    problem = check_generation(cfg, shape, 100, available=1)
    assert problem.startswith("an evaluation batch would need") and "lower eval.max_new_tokens or " \
                                                                   "generation.batch_size" in problem


def test_the_shape_is_read_without_loading_weights(tmp_path):
    assert model_shape("tiny").positions == 1024 and model_shape("tiny:tiny-3m").layers == 4
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 64, "num_hidden_layers": 3,
                                                      "num_attention_heads": 4, "hidden_size": 32,
                                                      "vocab_size": 100}))
    shape = model_shape(str(tmp_path))
    assert (shape.positions, shape.layers, shape.kv_heads, shape.head_dim, shape.vocab) == (64, 3, 4, 8, 100)
    assert model_shape(str(tmp_path / "nowhere")) is None and model_shape("no-org/no-such-model-59") is None


def test_evaluate_counts_its_longest_rendered_prompt(tmp_path):
    """eval.max_new_tokens=1024 fits the tiny model's positions alone, not after the toy prompts."""
    out = tmp_path / "out"
    line = _line(_run("evaluate", ["eval.max_new_tokens=1024", f"out_dir={out}"], tmp_path))
    assert line.startswith("error: eval.max_new_tokens=1024 + the longest prompt's ") and "rendered" in line, line
    import re

    prompt = int(re.search(r"the longest prompt's (\d+) tokens", line)[1])
    assert f"set eval.max_new_tokens to at most {1024 - prompt}" in line and not out.exists(), line


def test_distillation_checks_the_budgets_it_generates_with():
    """validate_distill passes the budget keys distillation generates with (its reasoning, algo.max_reasoning_tokens):
    its held-out evaluation is logit-based, so eval.max_new_tokens is not held to the model's positions there, while
    the same key is checked where a recipe evaluates by generation (the default keys)."""
    from trainer.config import validate_distill
    from trainer.config.validation import DISTILL_BUDGET_KEYS

    assert DISTILL_BUDGET_KEYS == ("algo.max_reasoning_tokens",)
    shape = ModelShape(positions=1024)
    over_eval = compose("distill", ["recipe=taste_tiny", "eval.max_new_tokens=5000", "eval.enabled=true",
                                    "trainer.eval_at_end=true"])
    validate_distill(over_eval)  # not a budget distillation generates with
    check_generation_budget(over_eval, shape, keys=DISTILL_BUDGET_KEYS)
    with pytest.raises(ConfigError, match=r"^eval.max_new_tokens=5000 is more than the 1024 positions"):
        check_generation_budget(over_eval, shape)  # the default keys: budget.py knows no recipe
    with pytest.raises(ConfigError, match=r"^algo.max_reasoning_tokens=5000 is more than the 1024 positions"):
        validate_distill(compose("distill", ["recipe=taste_tiny", "algo.max_reasoning_tokens=5000"]))
