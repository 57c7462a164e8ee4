"""recipes/distill.py: exact mid-epoch resume (with the position sampler), on-policy steps, calibration steps."""


import pytest

import dist_helpers as dh
from eval_hooks.builders.taste_toy import make_taste_toy
from eval_hooks.folds import split_task_folds
from selectrust.core.io import write_jsonl_atomic
from recipe_utils import read_metrics, run_recipe


@pytest.fixture(scope="module")
def folds(tmp_path_factory):
    d = tmp_path_factory.mktemp("toy")
    items = make_taste_toy(0, n_tasks=6).items
    train, test = split_task_folds(list(enumerate(items, 1)), 2, 0)
    write_jsonl_atomic(d / "train.jsonl", train)
    write_jsonl_atomic(d / "test.jsonl", test)
    return d


def _over(folds, run_dir, *extra):
    # The random-init tiny model writes random bytes: on_policy needs no well-formed teacher block.
    return ["recipe=taste_tiny", "data.source=files", f"data.train_path={folds / 'train.jsonl'}",
            f"data.eval_path={folds / 'test.jsonl'}", "model.path=tiny", f"trainer.run_dir={run_dir}",
            "algo.mode=on_policy", "algo.max_reasoning_tokens=8", "algo.max_positions=3", "algo.topk=5",
            "optim.batch_size=8", "trainer.max_steps=6", "trainer.save_every=0", "eval.enabled=false", *extra]


def test_resume_mid_epoch_equals_uninterrupted(folds, tmp_path):
    """24 training views, batch 8: an epoch is 3 steps; stopping at step 2 (mid-epoch) and resuming gives
    the per-step losses of an uninterrupted run (sampled reasoning and positions depend on seed, epoch
    and views only)."""
    full, part = tmp_path / "full", tmp_path / "part"
    run_recipe("distill_stage", "distill", _over(folds, full))
    run_recipe("distill_stage", "distill", _over(folds, part, "trainer.stop_at_step=2"))
    run_recipe("distill_stage", "distill", _over(folds, part))
    a = {m["step"]: m for m in read_metrics(full) if "loss" in m}
    b = {m["step"]: m for m in read_metrics(part) if "loss" in m}
    assert sorted(a) == sorted(b) == [1, 2, 3, 4, 5, 6]
    for s in a:
        for k in ("loss", "grad_norm", "lr"):
            assert abs(a[s][k] - b[s][k]) <= 1e-6, (s, k, a[s][k], b[s][k])
        assert a[s]["data_hash"] == b[s]["data_hash"]
        assert a[s]["positions"] == b[s]["positions"]
        assert a[s]["epoch"] == b[s]["epoch"]
    assert [a[s]["epoch"] for s in sorted(a)] == [0, 0, 1, 1, 1, 2]      # 3 steps an epoch: the resumed part crosses two
    # the trained weights are those of the uninterrupted run, bit for bit
    dh.safetensors_equal(full / "final" / "adapter_model.safetensors", part / "final" / "adapter_model.safetensors")
    assert (part / "run_complete.json").exists()
    assert a[6]["positions"] <= 8 * 3  # at most max_positions per view
    assert any(k.startswith("token_kl/parallel_") for k in a[1])  # per-cell metrics


def test_calibration_stage_logs_ce_per_cell(folds, tmp_path):
    run_recipe("distill_stage", "distill", _over(folds, tmp_path / "cal", "algo.stage=calibration", "trainer.max_steps=2"))
    m = [x for x in read_metrics(tmp_path / "cal") if "loss" in x]
    assert len(m) == 2 and m[0]["loss"] == pytest.approx(m[0]["calibration_ce"])
    assert any(k.startswith("calibration_ce/") for k in m[0])
    assert (tmp_path / "cal" / "final" / "adapter_config.json").exists()


def test_heldout_evaluation_at_step_0_and_each_epoch(folds, tmp_path):
    run_dir = tmp_path / "ev"
    run_recipe("distill_stage", "distill", _over(folds, run_dir, "eval.enabled=true", "trainer.eval_every_epoch=true",
                                           "trainer.max_steps=3"))
    evals = [m for m in read_metrics(run_dir) if "eval_epoch" in m]
    assert [(m["step"], m["eval_epoch"]) for m in evals] == [(0, "0"), (3, "1")]
    for m in evals:
        assert 0.0 <= m["eval/strict"] <= m["eval/mean"] <= 1.0 and "eval/ece" in m
    assert (run_dir / "eval" / "epoch_1" / "metrics.json").exists()
