"""Run records: metrics.jsonl always, wandb offline without credentials, config/commit/versions/command
in the run directory, loss spikes logged. (One run directory for all ranks: tests/test_distributed.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version

import pytest
import torch

import dist_helpers as dh
from recipe_utils import compose, read_metrics, reset_accelerate, run_recipe
from trainer.config import ConfigError, validate_dpo
from trainer.core.loop import train_loop
from trainer.model.policy import build_optimizer, build_scheduler
from trainer.core.run import setup_run, write_config


@pytest.fixture(autouse=True)
def _one_thread():
    yield from dh.one_torch_thread()


def test_run_dir_keeps_config_commit_versions_and_command(tmp_path, monkeypatch):
    argv = ["recipes/dpo.py", f"trainer.run_dir={tmp_path}", "algo.beta=0.25", "optim.lr=0.01"]
    monkeypatch.setattr(sys, "argv", argv)
    reset_accelerate()
    cfg = compose("dpo", argv[1:])
    ctx = setup_run(cfg, "dpo")
    write_config(ctx)
    meta = json.loads((tmp_path / "meta.json").read_text())
    assert meta["command"] == [sys.executable, *argv]
    assert meta["cwd"] == os.getcwd() and meta["recipe"] == "dpo" and meta["world_size"] == 1
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=dh.REPO, capture_output=True, text=True).stdout.strip()
    assert meta["git_commit"].split("-")[0] == head          # "-dirty" when the tree has changes
    for pkg in ("torch", "transformers", "trl", "peft", "accelerate"):
        assert meta["packages"][pkg] == version(pkg), pkg
    assert meta["packages"]["python"] == ".".join(map(str, sys.version_info[:3]))
    from omegaconf import OmegaConf

    saved = OmegaConf.load(tmp_path / "config.yaml")
    assert saved.algo.beta == 0.25 and saved.optim.lr == 0.01 and saved.trainer.run_dir == str(tmp_path)
    assert "${" not in (tmp_path / "config.yaml").read_text()     # resolved
    ctx.logger.log(3, {"loss": torch.tensor(0.5), "nan": float("nan")})
    assert read_metrics(tmp_path) == [{"step": 3, "time": pytest.approx(read_metrics(tmp_path)[0]["time"]),
                                       "loss": 0.5, "nan": "nan"}]


def test_logger_wandb_runs_offline_without_credentials(tmp_path, monkeypatch):
    pytest.importorskip("wandb")
    for k in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DIR", "WANDB_BASE_URL"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    pairs = dh.write_pairs(tmp_path / "pairs.jsonl", 3)
    run_dir = tmp_path / "run"
    try:
        run_recipe("dpo", "dpo", [f"data.train_path={pairs}", "eval=none", "logger=wandb", f"trainer.run_dir={run_dir}",
                                  "trainer.max_steps=2", "trainer.progress=false", "optim.batch_size=4"])
        assert os.environ.get("WANDB_MODE") == "offline"       # chosen because no credentials were present
    finally:
        os.environ.pop("WANDB_MODE", None)
    offline = list((run_dir / "wandb").glob("offline-run-*"))
    assert len(offline) == 1 and list(offline[0].glob("run-*.wandb")), list((run_dir / "wandb").iterdir())
    # metrics.jsonl is written whatever the logger
    assert [l["step"] for l in dh.step_rows(run_dir)] == [1, 2]


class _Regression:
    """Deterministic regression batches; draw ``spike_at`` has targets x100, so its loss is ~10^4 times
    the others'."""

    def __init__(self, spike_at: int):
        self.pos, self.spike_at = 0, spike_at

    epoch = 0

    def next_microbatch(self):
        g = torch.Generator().manual_seed(self.pos)
        x = torch.randn(8, 3, generator=g)
        y = x.sum(-1, keepdim=True) * (100.0 if self.pos == self.spike_at else 1.0)
        self.pos += 1
        return {"x": x, "y": y, "item_ids": [f"item{self.pos - 1}"]}

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, s):
        self.pos = s["pos"]


def _spike_run(tmp_path, *extra):
    reset_accelerate()
    cfg = compose("dpo", [f"trainer.run_dir={tmp_path}", "trainer.progress=false", "optim.grad_accum=1",
                          "optim.lr=0.0", "optim.warmup_ratio=0", "trainer.max_steps=15", "trainer.save_every=0",
                          "trainer.spike_factor=5", "eval=none", *extra])
    ctx = setup_run(cfg, "test")
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = build_optimizer(model, cfg.optim)
    sched = build_scheduler(opt, cfg.optim, max_steps=cfg.trainer.max_steps)
    model, opt = ctx.accelerator.prepare(model, opt)

    def step_fn(m, mb):
        loss = ((m(mb["x"]) - mb["y"]) ** 2).mean()
        return loss, {}

    train_loop(ctx, model=model, optimizer=opt, scheduler=sched, source=_Regression(spike_at=12), step_fn=step_fn)
    return dh.step_rows(tmp_path)


def test_loss_spike_is_logged(tmp_path, capsys):
    lines = _spike_run(tmp_path)
    assert [l["step"] for l in lines] == list(range(1, 16))
    spikes = [l["step"] for l in lines if l.get("loss_spike")]
    assert spikes == [13]                                        # draw 12 is the 13th step
    # A spike is logged, not skipped: the step counted and training went on.
    before = [l["loss"] for l in lines if l["step"] < 13]
    assert lines[12]["loss"] > 100 * max(before)
    assert "loss spike at step 13" in capsys.readouterr().out


def test_loss_spike_warmup_is_config(tmp_path):
    # trainer.spike_warmup_steps=13: the same spike at step 13 falls inside the warm-up and is not flagged.
    lines = _spike_run(tmp_path, "trainer.spike_warmup_steps=13")
    assert len(lines) == 15 and not any(l.get("loss_spike") for l in lines)


def test_bad_spike_settings_fail_validation():
    with pytest.raises(ConfigError, match=r"trainer.spike_ema_decay must be in \[0, 1\), got 1.0"):
        validate_dpo(compose("dpo", ["trainer.spike_ema_decay=1.0"]))
