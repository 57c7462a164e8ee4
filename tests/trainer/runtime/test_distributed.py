"""Real multi-process runs of the trainers on CPU (slow): 2-rank gloo DDP and DeepSpeed ZeRO-2.

Each 2-rank run (per-rank micro-batch b) is compared step by step with a single-process run of the same
recipe with micro-batch 2b: `SamplerSource` draws a global micro-batch and hands each rank its slice
(GRPO: the ranks assemble the global rollout batch and each takes its slice of every micro-batch),
DDP averages the ranks' gradients, so loss, gradient norm, learning rate and the data order
(`data_hash`, item ids in single-process order) must agree to float rounding.

    python -m pytest tests/trainer/runtime/test_distributed.py -m slow -q
"""

from __future__ import annotations

import json

import pytest

import dist_helpers as dh
from recipe_utils import run_recipe


@pytest.fixture(autouse=True)
def _one_thread():
    yield from dh.one_torch_thread()

pytestmark = pytest.mark.slow

COMMON = ["eval=none", "trainer.progress=false", "trainer.log_every=1"]


def _single(tmp_path, recipe, config, overrides):
    run_dir = tmp_path / "single"
    run_recipe(recipe, config, [*COMMON, f"trainer.run_dir={run_dir}", *overrides])
    return run_dir


def _check_one_run_dir(root, run_dir, world_size, distributed_type):
    meta = json.loads((run_dir / "meta.json").read_text())
    assert meta["world_size"] == world_size and meta["distributed_type"] == distributed_type
    # All ranks wrote into the one trainer.run_dir: nothing else appeared under the test's root (no
    # per-rank or timestamped directories), one metrics.jsonl, one line per step (main rank only).
    assert {p.name for p in root.iterdir()} - {"pairs.jsonl"} == {run_dir.name, "single"}
    assert len(list(run_dir.rglob("metrics.jsonl"))) == 1
    steps = [l["step"] for l in dh.step_rows(run_dir)]
    assert steps == sorted(set(steps))


def test_dpo_ddp_two_ranks_equals_single_process(tmp_path):
    over = ["trainer.max_steps=3", "optim.grad_accum=2", "trainer.save_every=0"]
    ddp_dir = tmp_path / "ddp"
    dh.run(dh.command("dpo", [*COMMON, f"trainer.run_dir={ddp_dir}", "trainer.device=cpu", "optim.batch_size=2",
                              *over], accelerate_config="cpu_ddp.yaml"))
    single = _single(tmp_path, "dpo", "dpo", ["optim.batch_size=4", *over])
    _check_one_run_dir(tmp_path, ddp_dir, 2, "DistributedType.MULTI_CPU")
    dh.assert_same_steps(dh.step_rows(ddp_dir), dh.step_rows(single), tol=1e-5)
    assert len(dh.step_rows(ddp_dir)) == 3
    # Adam divides by sqrt(v): a gradient entry near 0 turns the all-reduce's rounding into ~1e-5 of weight
    dh.safetensors_equal(ddp_dir / "final" / "adapter_model.safetensors",
                         single / "final" / "adapter_model.safetensors", atol=1e-4)


def test_dpo_deepspeed_zero2_two_ranks_and_resume(tmp_path):
    """ZeRO-2 on CPU (2 ranks, fp32, gloo): stop at step 2, resume from the DeepSpeed checkpoint to step 4;
    the whole run equals a single-process run (DeepSpeed owns accumulation, clipping and the step)."""
    pytest.importorskip("deepspeed", reason="deepspeed not installed (pip install -c constraints.txt deepspeed==0.19.8)")
    over = ["trainer.max_steps=4", "optim.grad_accum=2", "trainer.save_every=0", "optim.max_grad_norm=0.05"]
    ds_dir = tmp_path / "ds"
    cmd = ["trainer.device=auto", f"trainer.run_dir={ds_dir}", "optim.batch_size=2", *COMMON, *over]
    ds_env = {"DS_ACCELERATOR": "cpu"}
    dh.run(dh.command("dpo", [*cmd, "trainer.stop_at_step=2"], accelerate_config="cpu_zero2.yaml"), extra_env=ds_env)
    assert not (ds_dir / "run_complete.json").exists()
    ck = ds_dir / "checkpoints" / "step_2"
    assert (ck / "COMPLETE").exists() and (ck / "accelerate_state").is_dir() and (ck / "scheduler.json").exists()
    r = dh.run(dh.command("dpo", cmd, accelerate_config="cpu_zero2.yaml"), extra_env=ds_env)
    assert "resumed from" in r.stdout + r.stderr
    single = _single(tmp_path, "dpo", "dpo", ["optim.batch_size=4", *over])
    _check_one_run_dir(tmp_path, ds_dir, 2, "DistributedType.DEEPSPEED")
    a, b = dh.step_rows(ds_dir), dh.step_rows(single)
    assert len(a) == 4
    # clipping at 0.05 is active (the tiny model's first gradients are ~0.09): DeepSpeed clipped as we do
    assert max(l["grad_norm"] for l in b) > 0.05
    dh.assert_same_steps(a, b, tol=1e-5)
    assert (ds_dir / "run_complete.json").exists()
    dh.safetensors_equal(ds_dir / "final" / "adapter_model.safetensors",
                         single / "final" / "adapter_model.safetensors", atol=1e-4)


def _sft_rows(path, n=16):
    """Completions of different lengths, so the ranks' micro-batches hold different token counts."""
    rows = [{"item_id": f"s{i}", "prompt": f"say {i} in words", "completion": "ab" * (1 + (i * 7) % 6)}
            for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# token_mean: trainer/sft/data.py WindowSource normalises by the window's target tokens summed over ranks
# (TRL gathers num_items_in_batch the same way), so DDP's gradient average equals the global token mean.
@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
def test_sft_ddp_two_ranks_equals_single_process(tmp_path, aggregation):
    data = _sft_rows(tmp_path / "pairs.jsonl")
    over = [f"data.train_path={data}", f"algo.aggregation={aggregation}", "trainer.max_steps=3",
            "optim.grad_accum=2", "trainer.save_every=0"]
    ddp_dir = tmp_path / "ddp"
    dh.run(dh.command("sft", [*COMMON, f"trainer.run_dir={ddp_dir}", "trainer.device=cpu", "optim.batch_size=2",
                              *over], accelerate_config="cpu_ddp.yaml"))
    single = _single(tmp_path, "sft", "sft", ["optim.batch_size=4", *over])
    _check_one_run_dir(tmp_path, ddp_dir, 2, "DistributedType.MULTI_CPU")
    dh.assert_same_steps(dh.step_rows(ddp_dir), dh.step_rows(single), tol=1e-5)
    assert len(dh.step_rows(ddp_dir)) == 3


# GRPO: every rank draws the same global prompts, generates its share with per-prompt seeds (rank-independent
# samples), the groups are gathered, and drop/refill, advantages (std_scaling=batch over the global batch) and
# the token_mean normaliser (global tokens / (grad_accum * world)) are decided on the global batch; each rank
# trains on its slice of every global micro-batch (trainer/rl/rollout.py). The reward makes ~40% of the groups
# zero-variance, so rounds drop and refill; the test checks that they did, identically.
@pytest.mark.parametrize("aggregation,std_scaling,num_iterations", [("token_mean", "batch", 1),
                                                                    ("sequence_mean", "group", 2)])
def test_grpo_ddp_two_ranks_equals_single_process(tmp_path, aggregation, std_scaling, num_iterations):
    over = ["trainer.max_steps=3", "optim.grad_accum=2", "trainer.save_every=0", "algo.max_new_tokens=6",
            "algo.max_refill_rounds=2", "algo.reward=tests.dist_helpers:hash_reward",
            f"algo.aggregation={aggregation}", f"algo.std_scaling={std_scaling}", f"algo.num_iterations={num_iterations}"]
    ddp_dir = tmp_path / "ddp"
    dh.run(dh.command("grpo", [*COMMON, f"trainer.run_dir={ddp_dir}", "trainer.device=cpu", "optim.batch_size=4",
                               *over], accelerate_config="cpu_ddp.yaml"))
    single = _single(tmp_path, "grpo", "grpo", ["optim.batch_size=8", *over])
    _check_one_run_dir(tmp_path, ddp_dir, 2, "DistributedType.MULTI_CPU")
    a, b = dh.step_rows(ddp_dir), dh.step_rows(single)
    assert [l["step"] for l in a] == [1, 2, 3]
    dh.assert_same_steps(a, b, tol=1e-5, keys=("loss", "grad_norm", "lr", "policy_loss", "entropy",
                                               "advantage_abs_mean"))
    counts = ("groups_generated", "groups_dropped", "groups_refilled", "refill_rounds", "groups_padded_zero_variance",
              "reward_mean", "reward_mean_trained", "completion_len_mean", "rollout_index")
    for x, y in zip(a, b):  # logged on the steps that generated a rollout batch (every num_iterations-th)
        assert {k: x.get(k) for k in counts} == {k: y.get(k) for k in counts}, f"step {x['step']}"
    assert sum("groups_generated" in l for l in b) == -(-3 // num_iterations)
    assert sum(l.get("groups_dropped", 0) for l in b) > 0 and sum(l.get("groups_refilled", 0) for l in b) > 0
    assert all(l["grad_norm"] > 0 for l in b)
    print("max |loss ddp - single| =", max(abs(x["loss"] - y["loss"]) for x, y in zip(a, b)),
          "max |grad_norm ddp - single| =", max(abs(x["grad_norm"] - y["grad_norm"]) for x, y in zip(a, b)))
