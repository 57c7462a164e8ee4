"""recipes/grpo.py end to end on the tiny model: metrics, bad input before generation, env path, exact resume."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SMALL = ["eval=none", "algo.group_size=4", "algo.prompts_per_step=2", "optim.batch_size=8", "algo.max_new_tokens=3"]


def _run(run_dir: Path, *overrides: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT), WANDB_MODE="offline", HF_HUB_OFFLINE="1")
    cmd = [sys.executable, str(ROOT / "recipes" / "grpo.py"), f"trainer.run_dir={run_dir}", "trainer.progress=false",
           *overrides]
    return subprocess.run(cmd, cwd=run_dir.parent, env=env, capture_output=True, text=True, timeout=timeout)


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(l) for l in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_configs_compose():
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from trainer.config import register_schemas, validate_grpo, validate_sft

    register_schemas()
    with initialize_config_dir(str(ROOT / "conf"), version_base=None):
        for name, over in [("grpo", ["recipe=grpo_tiny"]), ("grpo", ["recipe=grpo_env_tiny"]),
                           ("grpo", ["recipe=aime_qwen3_4b", "data.train_path=x.jsonl"]),
                           ("grpo", ["recipe=webshop_qwen3_4b", "data.train_path=x.jsonl"]),
                           ("sft", ["recipe=box2_sft_tiny"]), ("sft", ["algo=counterfactual_sft_multiturn"])]:
            cfg = compose(config_name=name, overrides=over)
            (validate_grpo if name == "grpo" else validate_sft)(cfg)
            if "aime" in over[0] or "webshop" in over[0]:
                a, o = cfg.algo, cfg.optim
                assert a.prompts_per_step * a.group_size == o.batch_size * o.grad_accum * 8
            OmegaConf.to_container(cfg, resolve=True)


def test_grpo_recipe_end_to_end(tmp_path):
    run = tmp_path / "grpo"
    p = _run(run, *SMALL, "trainer.max_steps=3", "algo.reward=tests.box2_fakes:distinct_chars_parity",
             "algo.kl_beta=0.05", "optim.lr=1e-2")
    assert p.returncode == 0, p.stderr[-3000:]
    lines = _metrics(run)
    assert [l["step"] for l in lines] == [1, 2, 3]
    for k in ("loss", "reward_mean", "reward_std", "zero_variance_frac", "clip_frac_low", "clip_frac_high", "kl",
              "entropy", "completion_len_mean", "time_generation_s", "generation_fraction", "groups_dropped",
              "groups_refilled", "reward_errors"):
        assert k in lines[0], k
    assert all(0.0 <= l["generation_fraction"] <= 1.0 for l in lines)
    # the policy moved: KL to the adapter-disabled reference grows from exactly 0 at step 1
    assert lines[0]["kl"] == 0.0 and lines[-1]["kl"] > 0.0
    assert any(l["grad_norm"] > 0 for l in lines)
    assert (run / "final" / "adapter_model.safetensors").exists()


def test_grpo_logs_rollout_answer_status_counts(tmp_path):
    """On the tiny preset with short_text rows, each step's metrics line counts the rollouts the judge reads as
    ``multiple``, ``hedged`` and without an answer (``rollout/<status>``, out of ``rollout/judged``): the counts agree
    with a reward that scores exactly those rollouts 1 (one generation round, so its mean is over them all)."""
    rows = [{"item_id": f"i{k}", "prompt": f"On which continent is {c}? Answer with one name.", "gold": g,
             "wrong_value": w, "answer_type": "short_text", "relation": "continent", "subject": c}
            for k, (c, g, w) in enumerate([("Kenya", "Africa", "Asia"), ("Peru", "South America", "Africa"),
                                           ("France", "Europe", "Asia"), ("Japan", "Asia", "Europe")])]
    data = tmp_path / "continents.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    run = tmp_path / "grpo"
    p = _run(run, *SMALL, "trainer.max_steps=2", f"data.train_path={data}", "algo.max_new_tokens=6",
             "algo.reward=tests.box2_fakes:unanswered_by_the_judge", "algo.drop_zero_variance=false",
             "algo.max_refill_rounds=0")
    assert p.returncode == 0, p.stderr[-3000:]
    lines = _metrics(run)
    assert [l["step"] for l in lines] == [1, 2]
    for line in lines:
        assert line["rollout/judged"] == line["groups_generated"] * 4 == 8
        unanswered = line["rollout/multiple"] + line["rollout/hedged"] + line["rollout/no_answer"]
        assert all(float(line[k]).is_integer() for k in ("rollout/multiple", "rollout/hedged", "rollout/no_answer"))
        assert unanswered == pytest.approx(line["reward_mean"] * line["rollout/judged"])


def test_bad_input_fails_before_any_generation(tmp_path):
    p = _run(tmp_path / "a", *SMALL, "algo.reward=numeric_macth")
    assert p.returncode != 0 and "algo.reward='numeric_macth' is not a registered reward" in p.stderr
    assert not (tmp_path / "a" / "metrics.jsonl").exists()
    p = _run(tmp_path / "b", *SMALL, "data.max_prompt_len=20")
    assert p.returncode != 0 and "tokens > data.max_prompt_len=20" in p.stderr
    assert not (tmp_path / "b" / "metrics.jsonl").exists()
    p = _run(tmp_path / "c", "eval=none", "algo.group_size=4", "algo.prompts_per_step=2", "optim.batch_size=3")
    assert p.returncode != 0 and "must equal optim.batch_size * optim.grad_accum * world" in p.stderr
    p = _run(tmp_path / "d", *SMALL, "algo.env=webshop")
    assert p.returncode != 0 and "WebShopEnv is a template" in p.stderr


def test_grpo_env_recipe_runs(tmp_path):
    run = tmp_path / "env"
    p = _run(run, "recipe=grpo_env_tiny", "eval=none", "trainer.max_steps=2", "algo.env_max_turns=2",
             "algo.max_new_tokens=3")
    assert p.returncode == 0, p.stderr[-3000:]
    lines = _metrics(run)
    assert len(lines) == 2 and "reward_mean" in lines[0] and lines[0]["completion_len_mean"] >= 4


@pytest.mark.slow
def test_grpo_exact_resume(tmp_path):
    """N steps, stop (inside a num_iterations=2 replay), resume to 2N == uninterrupted 2N."""
    common = [*SMALL, "trainer.max_steps=4", "algo.num_iterations=2", "algo.kl_beta=0.05",
              "algo.reward=tests.box2_fakes:distinct_chars_parity", "optim.lr=1e-2"]
    full, part = tmp_path / "full", tmp_path / "part"
    assert _run(full, *common).returncode == 0
    p = _run(part, *common, "trainer.stop_at_step=3")
    assert p.returncode == 0, p.stderr[-3000:]
    state = json.loads((part / "checkpoints" / "step_3" / "trainer_state.json").read_text())
    assert state["source"]["batch"] is not None  # stopped mid-replay: the rollout batch was saved
    p = _run(part, *common)
    assert p.returncode == 0, p.stderr[-3000:]
    a, b = _metrics(full), _metrics(part)
    assert [l["step"] for l in b] == [1, 2, 3, 4]
    for x, y in zip(a, b):
        assert abs(x["loss"] - y["loss"]) <= 1e-6, (x["step"], x["loss"], y["loss"])
        assert x.get("reward_mean") == y.get("reward_mean")  # regenerated rollouts are identical
    assert "reward_mean" in a[2] and "reward_mean" not in a[3]  # step 4 replays the batch of step 3
    fa = (full / "final" / "adapter_model.safetensors").read_bytes()
    fb = (part / "final" / "adapter_model.safetensors").read_bytes()
    assert fa == fb
