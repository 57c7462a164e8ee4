"""The shared loop: numerical guards, atomic checkpoints, exact resume, config-change refusal."""

import json
import shutil

import pytest
import torch

from recipe_utils import compose, read_metrics, reset_accelerate
from trainer.runtime.checkpoint import CheckpointManager, complete_checkpoints
from selectrust.core.errors import ConfigError
from trainer.runtime.loop import NumericalError, train_loop
from trainer.runtime.run_dir import check_resume_config
from trainer.runtime.optim import build_optimizer, build_scheduler
from trainer.runtime.run import setup_run, write_config
from trainer.config.settings import to_settings


class Source:
    """Deterministic regression batches; ``poison`` maps a draw index to NaN inputs."""

    def __init__(self, poison=(), per_epoch=6):
        self.pos, self.poison, self.per_epoch = 0, set(poison), per_epoch

    @property
    def epoch(self):
        return self.pos // self.per_epoch

    def next_microbatch(self):
        g = torch.Generator().manual_seed(self.pos)
        x = torch.randn(4, 3, generator=g)
        if self.pos in self.poison:
            x = x * float("nan")
        self.pos += 1
        return {"x": x, "y": x.sum(-1, keepdim=True), "item_ids": [f"item{self.pos - 1}"]}

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, s):
        self.pos = s["pos"]


def step_fn(model, mb):
    loss = ((model(mb["x"]) - mb["y"]) ** 2).mean()
    return loss, {"mse": loss.detach()}


def _ctx(tmp_path, *extra):
    reset_accelerate()
    cfg = to_settings(compose("dpo", [f"trainer.run_dir={tmp_path}", "trainer.progress=false", "optim.grad_accum=2",
                                      "optim.lr=0.05", "trainer.max_steps=8", "trainer.save_every=2", *extra]))
    ctx = setup_run(cfg, "test")
    check_resume_config(ctx.cfg, ctx.run_dir / "config.yaml")
    write_config(ctx)
    return ctx


def _train(ctx, source):
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    opt = build_optimizer(model, ctx.cfg.optim)
    sched = build_scheduler(opt, ctx.cfg.optim, max_steps=ctx.cfg.trainer.max_steps)
    model, opt = ctx.accelerator.prepare(model, opt)
    return model, train_loop(ctx, model=model, optimizer=opt, scheduler=sched, source=source, step_fn=step_fn)


def test_nan_step_is_skipped_with_everything_untouched(tmp_path):
    # Draw 4 (the first micro-batch of step 3) is NaN once: the step is skipped, the source rewinds.
    class Flaky(Source):
        def next_microbatch(self):
            mb = super().next_microbatch()
            if self.pos - 1 == 4 and not getattr(self, "fired", False):
                self.fired = True
                mb["x"] = mb["x"] * float("nan")
            return mb

    ctx = _ctx(tmp_path / "flaky")
    model, res = _train(ctx, Flaky())
    clean_ctx = _ctx(tmp_path / "clean")
    clean_model, clean_res = _train(clean_ctx, Source())
    assert res.step == clean_res.step == 8
    # Skipping left weights/optimizer/scheduler/data position untouched, so the runs end identical.
    for a, b in zip(model.parameters(), clean_model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    lines = read_metrics(tmp_path / "flaky")
    skipped = [l for l in lines if l.get("skipped_nonfinite")]
    assert len(skipped) == 1 and skipped[0]["step"] == 2
    assert lines[-1]["skipped_total"] == 1


def test_consecutive_nan_steps_stop_naming_step_and_items(tmp_path):
    ctx = _ctx(tmp_path, "trainer.max_consecutive_skips=3")
    with pytest.raises(NumericalError, match=r"3 consecutive steps .* at optimizer step 2; item ids of the last "
                                             r"batch: \['item2', 'item3'\]"):
        _train(ctx, Source(poison={2}))


def test_checkpoints_are_complete_and_retention_keeps_last(tmp_path):
    ctx = _ctx(tmp_path, "trainer.keep_last=2")
    _train(ctx, Source())
    ck = tmp_path / "checkpoints"
    assert [p.name for p in complete_checkpoints(ck)] == ["step_6", "step_8"]
    assert not list(ck.glob(".tmp-*"))
    state = json.loads((ck / "step_8" / "trainer_state.json").read_text())
    assert state["step"] == 8 and state["source"] == {"pos": 16}


def test_resume_auto_ignores_incomplete_checkpoint_and_is_exact(tmp_path):
    full = _ctx(tmp_path / "full")
    full_model, _ = _train(full, Source())
    part = _ctx(tmp_path / "part", "trainer.stop_at_step=4")
    _train(part, Source())
    # A later, incomplete checkpoint (e.g. killed mid-write) must be ignored by resume=auto.
    fake = tmp_path / "part" / "checkpoints" / "step_6"
    shutil.copytree(tmp_path / "part" / "checkpoints" / "step_4", fake)
    (fake / "COMPLETE").unlink()
    resumed = _ctx(tmp_path / "part")
    model, res = _train(resumed, Source())
    assert res.step == 8
    for a, b in zip(model.parameters(), full_model.parameters()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    a, b = read_metrics(tmp_path / "full"), read_metrics(tmp_path / "part")
    assert [l["step"] for l in a] == [l["step"] for l in b]
    for x, y in zip(a, b):
        for k in ("loss", "grad_norm", "lr"):
            assert abs(x[k] - y[k]) <= 1e-6, (x["step"], k)


def test_resume_with_changed_config_is_refused_listing_keys(tmp_path):
    _train(_ctx(tmp_path, "trainer.stop_at_step=2"), Source())
    with pytest.raises(ConfigError) as e:
        _ctx(tmp_path, "optim.lr=0.1", "algo.beta=0.2")
    msg = str(e.value)
    assert "optim.lr: saved 0.05 != now 0.1" in msg and "algo.beta: saved 0.1 != now 0.2" in msg
    assert "allow_config_change" in msg
    _ctx(tmp_path, "optim.lr=0.1", "trainer.allow_config_change=true")  # explicitly allowed


def test_explicit_resume_path_must_be_complete(tmp_path):
    ctx = _ctx(tmp_path)
    mgr = CheckpointManager(tmp_path, ctx.accelerator)
    (tmp_path / "checkpoints" / "step_3").mkdir(parents=True)
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        mgr.resolve_resume(str(tmp_path / "checkpoints" / "step_3"))


def test_the_checkpoint_module_owns_the_layout_and_the_resumable_rule(tmp_path):
    from trainer.runtime.checkpoint import checkpoints_dir, resumable, run_dir_of

    run = tmp_path / "run"
    assert not resumable(run)
    ctx = _ctx(run, "trainer.stop_at_step=2")
    _train(ctx, Source())
    assert resumable(run)  # what recipes/stages/ and recipes/distill.py ask
    [ck] = complete_checkpoints(checkpoints_dir(run))
    assert run_dir_of(ck) == run.resolve() and ck.name == "step_2"


def test_a_run_whose_only_save_was_cut_short_is_not_resumable(tmp_path):
    """One rule for "running this again continues it": a complete checkpoint. A checkpoints directory holding only
    a save cut short (``.tmp-step_N``) starts over, so the stage runner retrains and the distillation trainer runs
    its epoch-0 evaluation again."""
    from trainer.runtime.checkpoint import checkpoints_dir, resumable

    run = tmp_path / "run"
    (checkpoints_dir(run) / ".tmp-step_2").mkdir(parents=True)
    assert not resumable(run)
    ctx = _ctx(run, "trainer.stop_at_step=2")
    _train(ctx, Source())
    assert resumable(run)


def test_loop_state_is_saved_and_restored_field_by_field(tmp_path):
    from dataclasses import asdict

    from trainer.runtime.loop import LoopState

    ctx = _ctx(tmp_path, "trainer.stop_at_step=4")
    _, res = _train(ctx, Source())
    assert res.stopped_early and not res.preempted  # early stopping is the loop result's, not the context's
    assert not hasattr(ctx, "stopped_early")
    saved = json.loads((tmp_path / "checkpoints" / "step_4" / "trainer_state.json").read_text())
    assert set(saved) == {"step", "source", *asdict(LoopState())}
    assert saved["epoch_done"] == 1 and saved["loss_ema"] is not None  # 8 draws of 6 per epoch
    state = LoopState()
    state.load({k: v for k, v in saved.items() if k not in ("step", "source")})
    assert asdict(state) == {k: saved[k] for k in asdict(LoopState())}


def test_deepspeed_is_detected_in_one_place(monkeypatch):
    from types import SimpleNamespace

    from trainer.runtime.distributed import uses_deepspeed

    assert uses_deepspeed(SimpleNamespace(distributed_type="DistributedType.DEEPSPEED"))
    assert not uses_deepspeed(SimpleNamespace(distributed_type="DistributedType.MULTI_GPU"))
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    assert uses_deepspeed()
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "false")
    assert not uses_deepspeed()


def test_a_step_record_gathers_metrics_and_item_ids_in_one_collective(monkeypatch):
    # two ranks, faked: one all_gather_object carries (metrics, item ids); the metrics are averaged over the ranks and
    # the data hash is that of the global draw order (micro-batch by micro-batch, rank slices in rank order)
    import hashlib
    from types import SimpleNamespace

    from trainer.runtime import loop

    other = ({"mse": 3.0, "loss": 5.0}, [["c"], ["d"]])
    calls = []

    def gather(acc, obj):
        calls.append(obj)
        return [obj, other]

    monkeypatch.setattr("trainer.runtime.loop.all_gather_object", gather)
    tcfg = SimpleNamespace(spike_warmup_steps=0, spike_factor=10.0, spike_ema_decay=0.9)
    ctx = SimpleNamespace(accelerator=SimpleNamespace(num_processes=2), cfg=SimpleNamespace(trainer=tcfg), is_main=True)
    source = SimpleNamespace(epoch=0)
    last, loss_f = loop._step_record(ctx, loop.LoopState(), source, step=1, micro_metrics=[{"mse": 1.0}],
                                     loss_value=torch.tensor(1.0), lr=0.1, grad_norm=None,
                                     per_micro_ids=[["a"], ["b"]], t0=0.0)
    assert len(calls) == 1 and calls[0] == ({"mse": 1.0, "loss": 1.0}, [["a"], ["b"]])
    assert last["mse"] == 2.0 and loss_f == 3.0
    assert last["data_hash"] == hashlib.sha1("\x1f".join(["a", "c", "b", "d"]).encode()).hexdigest()[:16]
