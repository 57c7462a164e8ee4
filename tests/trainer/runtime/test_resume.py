"""Exact resume with the real DPO recipe (tiny model, fp32, CPU): N steps with trainer.stop_at_step=N,
then the same command again to 2N, equals an uninterrupted 2N run: per-step loss, gradient norm and
learning rate within 1e-6, the same data (per-step hash of the item ids, epoch counter, per-condition
keys) and bit-identical final adapter weights.

The pair file has 5 quartets = 20 rows, so the epoch boundaries are known:
(a) batch 4: 5 steps per epoch; stop at 3 (mid-epoch), the resumed part crosses the boundary at 5;
(b) batch 4: stop exactly at the epoch boundary (step 5), resume to 10;
(c) batch 2 x grad_accum 3 = 6 rows per step: step 4 straddles the boundary (rows 18-19 of epoch 0 and
    0-3 of epoch 1) and the checkpoint at step 4 sits mid-epoch-1, inside an accumulation remainder.
"""

from __future__ import annotations

import json

import pytest

import dist_helpers as dh
from recipe_utils import run_recipe


@pytest.fixture(autouse=True)
def _one_thread():
    yield from dh.one_torch_thread()


def _run(run_dir, pairs, overrides):
    return run_recipe("dpo", "dpo", [f"data.train_path={pairs}", "eval=none", f"trainer.run_dir={run_dir}",
                                     "trainer.progress=false", "trainer.save_every=0", *overrides])


CASES = {
    "mid_epoch": (3, ["optim.batch_size=4", "optim.grad_accum=1"]),
    "epoch_boundary": (5, ["optim.batch_size=4", "optim.grad_accum=1"]),
    "accum_remainder": (4, ["optim.batch_size=2", "optim.grad_accum=3"]),
}


def _check_resume(tmp_path, capsys, n, overrides):
    pairs = dh.write_pairs(tmp_path / "pairs.jsonl", 5)
    over = [f"trainer.max_steps={2 * n}", *overrides]
    full = tmp_path / "full"
    res_full = _run(full, pairs, over)
    part = tmp_path / "part"
    res_part = _run(part, pairs, [*over, f"trainer.stop_at_step={n}"])
    assert res_part.step == n and res_part.stopped_early and not res_part.preempted
    assert not (part / "run_complete.json").exists()
    state = json.loads((part / "checkpoints" / f"step_{n}" / "trainer_state.json").read_text())
    capsys.readouterr()
    res_resumed = _run(part, pairs, over)
    assert f"resumed from {part / 'checkpoints' / f'step_{n}'} at step {n}" in capsys.readouterr().out
    assert res_resumed.step == res_full.step == 2 * n and not res_resumed.stopped_early
    a, b = dh.step_rows(full), dh.step_rows(part)
    assert [l["step"] for l in b] == list(range(1, 2 * n + 1))  # lines after the checkpoint were not duplicated
    dh.assert_same_steps(a, b, tol=1e-6)
    dh.safetensors_equal(full / "final" / "adapter_model.safetensors", part / "final" / "adapter_model.safetensors")
    assert (part / "run_complete.json").exists()
    return state, a


@pytest.mark.parametrize("case", ["mid_epoch", "epoch_boundary", "accum_remainder"])
def test_dpo_resume_is_exact(tmp_path, capsys, case):
    n, overrides = CASES[case]
    state, rows = _check_resume(tmp_path, capsys, n, overrides)
    epochs = [l["epoch"] for l in rows]
    if case == "mid_epoch":
        assert state["source"] == {"epoch": 0, "position": 12}
        assert epochs == [0, 0, 0, 0, 1, 1]
    elif case == "epoch_boundary":
        assert state["source"] == {"epoch": 1, "position": 0} and state["epoch_done"] == 1
        assert epochs == [0] * 4 + [1] * 5 + [2]
    else:
        assert state["source"] == {"epoch": 1, "position": 4}   # 24 draws = 20 (epoch 0) + 4
        assert epochs == [0, 0, 0, 1, 1, 1, 2, 2]                # 6 draws per step: 20 at step 4, 40 at step 7
    # Different epochs draw different orders (the data hash is not trivially constant).
    assert len({l["data_hash"] for l in rows}) == len(rows)


def test_sft_resume_is_exact_across_an_accumulation_window(tmp_path, capsys):
    """SFT (token-mean over the accumulation window): 16 examples, 2 x 3 = 6 per step, so step 3 straddles
    the epoch boundary and the checkpoint at step 3 sits 2 draws into epoch 1."""
    data = tmp_path / "sft.jsonl"
    data.write_text("".join(json.dumps({"item_id": f"s{i}", "prompt": f"say {i}", "completion": "ab" * (1 + i % 5)})
                            + "\n" for i in range(16)))
    common = [f"data.train_path={data}", "eval=none", "trainer.progress=false", "trainer.save_every=0",
              "trainer.max_steps=6", "optim.batch_size=2", "optim.grad_accum=3"]
    full, part = tmp_path / "full", tmp_path / "part"
    run_recipe("sft", "sft", [*common, f"trainer.run_dir={full}"])
    run_recipe("sft", "sft", [*common, f"trainer.run_dir={part}", "trainer.stop_at_step=3"])
    state = json.loads((part / "checkpoints" / "step_3" / "trainer_state.json").read_text())
    assert state["source"] == {"epoch": 1, "position": 2}
    capsys.readouterr()
    run_recipe("sft", "sft", [*common, f"trainer.run_dir={part}"])
    assert "resumed from" in capsys.readouterr().out
    a, b = dh.step_rows(full), dh.step_rows(part)
    assert [l["epoch"] for l in a] == [0, 0, 1, 1, 1, 2]
    dh.assert_same_steps(a, b, tol=1e-6)
    dh.safetensors_equal(full / "final" / "adapter_model.safetensors", part / "final" / "adapter_model.safetensors")
