"""Run records: metrics.jsonl always, wandb offline without credentials, config/commit/versions/command
in the run directory, loss spikes logged. (One run directory for all ranks: tests/trainer/runtime/test_distributed.py.)"""

from __future__ import annotations

import importlib.machinery
import json
import os
import subprocess
import sys
import types
from importlib.metadata import version

import pytest
import torch

import dist_helpers as dh
from recipe_utils import compose, read_metrics, reset_accelerate, run_recipe
from selectrust.core.errors import ConfigError
from trainer.config import validate_dpo
from trainer.runtime.loop import train_loop
from trainer.runtime.optim import build_optimizer, build_scheduler
from trainer.runtime.run import setup_run, write_config
from trainer.config.settings import to_settings


@pytest.fixture(autouse=True)
def _one_thread():
    yield from dh.one_torch_thread()


def test_run_dir_keeps_config_commit_versions_and_command(tmp_path, monkeypatch):
    argv = ["recipes/dpo.py", f"trainer.run_dir={tmp_path}", "algo.beta=0.25", "optim.lr=0.01"]
    monkeypatch.setattr(sys, "argv", argv)
    reset_accelerate()
    cfg = to_settings(compose("dpo", argv[1:]))  # the typed settings, as recipes/dpo.py hands them down
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
    # the logger stamps each line with the wall clock, rounded to the millisecond
    monkeypatch.setattr(sys.modules[type(ctx.logger).__module__], "time", types.SimpleNamespace(time=lambda: 1.7e9 + 0.12345))
    ctx.logger.log(3, {"loss": torch.tensor(0.5), "nan": float("nan")})
    assert read_metrics(tmp_path) == [{"step": 3, "time": 1700000000.123, "loss": 0.5, "nan": "nan"}]


class _FakeWandb(types.ModuleType):
    """Stands in for the ``wandb`` package (an optional extra, absent from ``.[dev]``): records what
    ``wandb.init`` was given, the ``WANDB_MODE`` it saw, every ``log`` call and ``finish``."""

    def __init__(self):
        super().__init__("wandb")
        self.__spec__ = importlib.machinery.ModuleSpec("wandb", None)   # found by importlib.util.find_spec
        self.inits, self.logged, self.finished = [], [], 0

    def init(self, **kwargs):
        self.inits.append({**kwargs, "WANDB_MODE": os.environ.get("WANDB_MODE")})
        fake = self

        class Run:
            def log(self, data, step):
                fake.logged.append((step, dict(data)))

            def finish(self):
                fake.finished += 1

        return Run()


@pytest.fixture()
def fake_wandb(monkeypatch):
    fake = _FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", fake)
    for k in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_DIR", "WANDB_BASE_URL"):
        monkeypatch.delenv(k, raising=False)
    yield fake
    os.environ.pop("WANDB_MODE", None)    # the logger sets it in the process environment


def test_logger_wandb_runs_offline_without_credentials(tmp_path, fake_wandb):
    pairs = dh.write_pairs(tmp_path / "pairs.jsonl", 3)
    run_dir = tmp_path / "run"
    run_recipe("dpo", "dpo", [f"data.train_path={pairs}", "eval=none", "logger=wandb", f"trainer.run_dir={run_dir}",
                              "trainer.max_steps=2", "trainer.progress=false", "optim.batch_size=4"])
    assert len(fake_wandb.inits) == 1 and fake_wandb.finished == 1
    init = fake_wandb.inits[0]
    assert init["WANDB_MODE"] == "offline"            # chosen because no credentials were present
    assert (init["project"], init["name"], init["dir"], init["resume"]) == ("selectrust", "run", str(run_dir), "allow")
    assert init["config"]["algo"]["beta"] == compose("dpo", []).algo.beta
    # metrics.jsonl is written whatever the logger, and W&B gets the same numbers at the same steps
    rows = dh.step_rows(run_dir)
    assert [l["step"] for l in rows] == [1, 2] and [s for s, _ in fake_wandb.logged] == [1, 2]
    for (step, data), row in zip(fake_wandb.logged, rows):
        assert data == {k: v for k, v in row.items() if isinstance(v, (int, float))}, step


def test_logger_wandb_keeps_credentials_and_an_explicit_mode(tmp_path, fake_wandb, monkeypatch):
    from trainer.runtime.run import MetricsLogger

    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)                      # credentials: no offline switch
    MetricsLogger(tmp_path, is_main=True, kind="wandb", name="x").close()
    monkeypatch.delenv("WANDB_API_KEY")
    monkeypatch.setenv("WANDB_MODE", "disabled")                       # the user's own choice is kept
    MetricsLogger(tmp_path, is_main=True, kind="wandb").close()
    MetricsLogger(tmp_path, is_main=False, kind="wandb").close()       # other ranks never call wandb
    assert [(i["WANDB_MODE"], i["name"]) for i in fake_wandb.inits] == [(None, "x"), ("disabled", tmp_path.name)]
    assert fake_wandb.finished == 2


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
    cfg = to_settings(compose("dpo", [f"trainer.run_dir={tmp_path}", "trainer.progress=false", "optim.grad_accum=1",
                                      "optim.lr=0.0", "optim.warmup_ratio=0", "trainer.max_steps=15",
                                      "trainer.save_every=0", "trainer.spike_factor=5", "eval=none", *extra]))
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
