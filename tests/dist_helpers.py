"""Launching recipes in subprocesses (plain python, or 2-rank `accelerate launch` on CPU) for the
distributed, resume, kill-during-save and preemption tests."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAUNCH = REPO / "launch"

# Variables that would change what a launched recipe does; the tests set what they need explicitly.
_SCRUB = ("ACCELERATE_USE_CPU", "ACCELERATE_USE_DEEPSPEED", "SELECTRUST_TEST_SLEEP_IN_SAVE", "WANDB_MODE",
          "WANDB_API_KEY", "DS_ACCELERATOR", "ACCELERATE_CONFIG_FILE")


def env(**extra: str) -> dict[str, str]:
    out = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    out.update({"OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "TOKENIZERS_PARALLELISM": "false",
                "PYTHONUNBUFFERED": "1"})
    out.update(extra)
    return out


def command(recipe: str, overrides: list[str], *, accelerate_config: str | None = None) -> list[str]:
    """``python recipes/<recipe>.py ...`` or ``accelerate launch --config_file launch/<cfg> recipes/<recipe>.py ...``."""
    script = str(REPO / "recipes" / f"{recipe}.py")
    if accelerate_config is None:
        return [sys.executable, script, *overrides]
    return [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(LAUNCH / accelerate_config),
            script, *overrides]


def run(cmd: list[str], *, extra_env: dict[str, str] | None = None, timeout: float = 240) -> subprocess.CompletedProcess:
    r = subprocess.run(cmd, env=env(**(extra_env or {})), cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(cmd)}\nexit {r.returncode}\n{r.stdout[-4000:]}\n{r.stderr[-6000:]}"
    return r


def metrics(run_dir) -> list[dict]:
    path = Path(run_dir) / "metrics.jsonl"
    return [json.loads(l) for l in path.read_text().splitlines() if l.strip()]


def step_rows(run_dir) -> list[dict]:
    """The training lines of metrics.jsonl (one per optimizer step), without eval or skip lines."""
    return [l for l in metrics(run_dir) if "loss" in l and "lr" in l and not l.get("skipped_nonfinite")]


def assert_same_steps(a: list[dict], b: list[dict], *, tol: float, keys=("loss", "grad_norm", "lr")) -> None:
    assert [l["step"] for l in a] == [l["step"] for l in b]
    for x, y in zip(a, b):
        for k in keys:
            assert abs(x[k] - y[k]) <= tol, f"step {x['step']} {k}: {x[k]!r} vs {y[k]!r}"
        assert x["data_hash"] == y["data_hash"], f"step {x['step']}: different data"
        assert x["epoch"] == y["epoch"], f"step {x['step']}: epoch {x['epoch']} vs {y['epoch']}"
        conds_x = sorted(k for k in x if k.startswith("rewards/accuracies/"))
        conds_y = sorted(k for k in y if k.startswith("rewards/accuracies/"))
        assert conds_x == conds_y, f"step {x['step']}: per-condition keys differ"


def safetensors_equal(a: Path, b: Path, *, atol: float = 0.0) -> None:
    import torch
    from safetensors.torch import load_file

    x, y = load_file(str(a)), load_file(str(b))
    assert set(x) == set(y)
    for k in x:
        torch.testing.assert_close(x[k], y[k], rtol=0, atol=atol, msg=lambda m: f"{k}: {m}")


def write_pairs(path: Path, n_quartets: int) -> Path:
    """``n_quartets`` SCOPE quartets (4 rows each) of a key->digit task, small enough for short epochs."""
    rows = []
    for i in range(n_quartets):
        g, w = i % 10, (i + 3) % 10
        prompts = {"clean": f"key k{i}?", "misleading": f"note: k{i}={w}. key k{i}?",
                   "correct": f"note: k{i}={g}. key k{i}?", "irrelevant": f"note: sky is blue. key k{i}?"}
        rows += [{"pair_id": f"p{i}", "item_id": f"i{i}-{c}", "condition": c, "prompt": p, "chosen": str(g),
                  "rejected": str(w)} for c, p in prompts.items()]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def hash_reward(completion: str, row: dict) -> float:
    """A GRPO reward for the untrained tiny model (``algo.reward=tests.dist_helpers:hash_reward``): 1 for
    about a fifth of the completions, by a hash of the text, so that many groups of 4 are all-zero
    (dropped and refilled) and the others carry a signal."""
    import hashlib

    return float(int(hashlib.sha1(completion.encode()).hexdigest(), 16) % 5 == 0)


def one_torch_thread():
    """Generator for an autouse fixture: in-process recipe runs use one torch thread. On a busy 2-core
    host, torch's default thread pool spins against the other processes: a tiny-model step takes ~3 s
    instead of ~0.2 s. (The subprocesses get OMP_NUM_THREADS=1 from ``env``.)"""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
