"""Smoke test of ``bench/bench_dpo_step.py`` on the ~0.1M 'tiny' preset (seconds, not a timing test).

Checks the parts that can be wrong regardless of machine speed: the synthetic rows have the exact
token lengths asked for, N counts the base model's linear weights (hand-computed for the tiny preset),
our step and TRL's DPOTrainer step do the same training (equal losses after an optimizer step), and the
summary / RSS lines are printed.
"""

from __future__ import annotations

import math

import pytest
import torch


@pytest.fixture(scope="module")
def bench():
    from bench import bench_dpo_step

    return bench_dpo_step


@pytest.fixture()
def keep_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def test_synthetic_rows_have_exact_lengths(bench, tiny_tokenizer):
    from trainer.logprobs.logprobs import build_preference_batch

    prompts, chosen, rejected = bench.synthetic_pairs(tiny_tokenizer, pairs=3, seq_len=40)
    batch = build_preference_batch(tiny_tokenizer, prompts, chosen, rejected, max_prompt_len=20,
                                   max_completion_len=20, truncation="error")
    assert tuple(batch.input_ids.shape) == (6, 40)
    assert batch.prompt_lengths == [20] * 6 and batch.completion_lengths == [20] * 6
    assert len(set(chosen) | set(rejected)) == 6  # no identical chosen/rejected


def test_linear_weight_count_is_base_projections_plus_lm_head(bench, tiny_model_dir):
    # tiny preset: hidden 64, 2 layers, 4 heads x head_dim 16, 2 kv heads, intermediate 176, vocab 7 + 256
    per_layer = 64 * 64 + 2 * (64 * 32) + 64 * 64 + 3 * (64 * 176)
    expected = 2 * per_layer + 263 * 64
    counts, model = bench.build_our_policy(str(tiny_model_dir), rank=4)
    assert counts["n_linear"] == expected == 108992
    assert bench.linear_weight_count(model) == expected  # LoRA factors are not counted once wrapped
    assert counts["weight_bytes"] == 4 * counts["params_total"]


def test_quick_tiny_run_matches_trl_and_prints_summary(bench, keep_threads, capsys):
    summary = bench.main(["--quick", "--tiny", "--mode", "time", "--steps", "1", "--warmup", "1", "--threads", "1"])
    out = capsys.readouterr().out
    for key in ("ratio_ours_trl", "step_time_ours_s", "step_time_trl_s", "gemm_peak", "flop_frac_ours",
                "flop_frac_trl", "loss_check", "=== end summary ==="):
        assert key in out, key
    row = summary["rows"][0]
    # After one optimizer step from the same adapter init, both sides still compute the same loss, and it moved.
    assert abs(row["ours_loss"] - math.log(2)) > 1e-5
    assert row["ours_loss"] == pytest.approx(row["trl_loss"], abs=1e-5)
    assert summary["ratio_median"] == pytest.approx(row["ours_s"] / row["trl_s"])
    assert summary["flops_per_step"] == 6 * 108992 * (2 * 4 * 64)


def test_rss_mode_prints_peak_and_weight_bytes(bench, keep_threads, capsys):
    bench.main(["--mode", "rss-disabled", "--tiny", "--rss-steps", "1", "--threads", "1"])
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("RSS_RESULT ")]
    assert len(line) == 1
    import json

    result = json.loads(line[0][len("RSS_RESULT "):])
    assert result["weight_bytes"] == 4 * 126144  # tiny preset parameter count, fp32
    assert result["peak_bytes"] > result["weight_bytes"]
    assert result["ru_maxrss_bytes"] >= result["peak_bytes"] * 0.99  # ru_maxrss also covers the parent's history


def test_distill_memory_mode_dense_and_gathered_give_the_same_loss(keep_threads, capsys):
    """bench/bench_distill_step.py --memory on the 'tiny' preset with a 1,024-token vocabulary: both paths
    (each in its own subprocess) compute the same stage-1 loss; the summary line carries both peaks."""
    from bench import bench_distill_step

    summary = bench_distill_step.main(["--memory", "--preset", "tiny", "--vocab", "1024", "--views", "2",
                                       "--reasoning", "8", "--threads", "1"])
    assert '"peak_ratio"' in capsys.readouterr().out
    assert summary["vocab"] == 1024 and summary["positions"] == 2 * 9
    assert summary["loss_dense"] > 1e-4  # teacher (with the hint) and student differ
    assert summary["loss_gathered"] == pytest.approx(summary["loss_dense"], rel=1e-3, abs=1e-7)
    assert summary["peak_dense_mib"] > 0 and summary["peak_gathered_mib"] > 0
