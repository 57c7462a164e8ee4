"""Smoke runs of the issue-17 scripts (bench/bench_logprob_memory.py, bench/bench_dpo_lengths.py,
launch/gpu_real_shapes.py): each runs its whole code path on CPU at a tiny size and ends with the JSON
line it promises. Not timing tests: the ratios are printed by the benches, not asserted here."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _run(*args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, *args], cwd=str(ROOT), env=env, capture_output=True, text=True,
                          timeout=timeout)


def _last_json(out: subprocess.CompletedProcess):
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_dpo_lengths_without_data_fails_clearly():
    out = _run("bench/bench_dpo_lengths.py", timeout=120)
    assert out.returncode == 2 and "--data PATH is required" in out.stderr and "build-gsm8k" in out.stderr


@pytest.mark.slow
def test_logprob_memory_smoke():
    summary = _last_json(_run("bench/bench_logprob_memory.py", "--smoke", "--threads", "1"))
    assert summary["peak_ratio"] > 0 and summary["time_ratio"] > 0 and summary["vocab"] == 4096


@pytest.mark.slow
def test_dpo_lengths_smoke(tmp_path, gsm8k_path):
    gsm = gsm8k_path
    data = tmp_path / "mist_gsm8k.jsonl"
    built = _run("-m", "eval_hooks", "build-gsm8k", "--data", str(gsm), "--out", str(data), "--seed", "0")
    assert built.returncode == 0, built.stderr[-2000:]
    summary = _last_json(_run("bench/bench_dpo_lengths.py", "--data", str(data), "--smoke", "--threads", "1",
                              "--no-padding-free"))
    assert summary["steps"] == 2 and summary["pairs"] == 8
    assert 0 <= summary["padded_fraction_ours"] < summary["padded_fraction_trl"]


@pytest.mark.slow
def test_gpu_real_shapes_smoke():
    rows = _last_json(_run("launch/gpu_real_shapes.py", "--smoke", "--models", "qwen3_4b"))
    assert [(r["path"], r["phase"]) for r in rows] == [(p, ph) for p in ("logprob_chunk=0", "logprob_chunk=32")
                                                       for ph in ("dpo", "sft", "grpo")]
