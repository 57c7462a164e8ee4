"""SIGKILL during a checkpoint write (slow): the previous checkpoint still loads, resume=auto picks the
newest *complete* one, and the resumed run is still exact.

The DPO recipe runs in a subprocess with checkpoints every 2 steps. The test hook
``SELECTRUST_TEST_SLEEP_IN_SAVE=<phase>:<step>`` (trainer/runtime/checkpoint.py) makes the save of step 4 pause
at a named point and print a line; the test then SIGKILLs the process there:

- ``files``: ``.tmp-step_4/`` holds the RNG files and the adapter but no optimizer or trainer state;
- ``before_rename``: ``.tmp-step_4/`` is complete and synced but not renamed;
- ``before_marker``: ``step_4/`` exists (renamed) but has no ``COMPLETE`` marker, the case where
  picking the highest-numbered directory (HF Trainer) would load a checkpoint nobody vouched for.
The kill at ``before_marker:2`` leaves no complete checkpoint at all: resume=auto starts fresh.
"""

from __future__ import annotations

import json
import signal
import subprocess
import threading

import pytest

import dist_helpers as dh
from recipe_utils import compose, reset_accelerate, run_recipe
from trainer.runtime.checkpoint import MARKER, CheckpointManager, complete_checkpoints

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _one_thread():
    yield from dh.one_torch_thread()


def _overrides(pairs, run_dir):
    return [f"data.train_path={pairs}", "eval=none", f"trainer.run_dir={run_dir}", "trainer.progress=false",
            "trainer.max_steps=6", "trainer.save_every=2", "trainer.keep_last=1", "optim.batch_size=4"]


def _run_until_paused(cmd, phase_step: str, timeout: float = 180) -> list[str]:
    """Start the recipe with the hook set, read its output until the pause line, then SIGKILL it."""
    proc = subprocess.Popen(cmd, env=dh.env(SELECTRUST_TEST_SLEEP_IN_SAVE=phase_step), cwd=dh.REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    watchdog = threading.Timer(timeout, proc.kill)
    watchdog.start()
    lines, paused = [], False
    try:
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("SELECTRUST_SAVE_PAUSE"):
                paused = True
                proc.send_signal(signal.SIGKILL)
                break
    finally:
        watchdog.cancel()
        proc.wait(timeout=30)
        proc.stdout.close()
    assert paused, "the run never reached the pause point:\n" + "".join(lines[-40:])
    assert proc.returncode == -signal.SIGKILL
    assert lines[-1].split()[1:] == phase_step.split(":")
    return lines


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """An uninterrupted 6-step run (in-process)."""
    root = tmp_path_factory.mktemp("reference")
    pairs = dh.write_pairs(root / "pairs.jsonl", 5)
    run_recipe("dpo", "dpo", _overrides(pairs, root / "run"))
    return pairs, root / "run"


@pytest.mark.parametrize("phase_step", ["files:4", "before_rename:4", "before_marker:4", "before_marker:2"])
def test_sigkill_during_checkpoint_write(tmp_path, reference, phase_step):
    pairs, ref_dir = reference
    run_dir = tmp_path / "run"
    _run_until_paused(dh.command("dpo", _overrides(pairs, run_dir)), phase_step)
    ck = run_dir / "checkpoints"
    phase, step = phase_step.split(":")
    leftover = {"files": ck / f".tmp-step_{step}", "before_rename": ck / f".tmp-step_{step}",
                "before_marker": ck / f"step_{step}"}[phase]
    assert leftover.is_dir() and not (leftover / MARKER).exists()
    if phase == "files":
        assert not (leftover / "trainer_state.json").exists()       # really killed mid-write
    else:
        assert (leftover / "trainer_state.json").exists()

    reset_accelerate()
    acc_cfg = compose("dpo", _overrides(pairs, run_dir))
    from accelerate import Accelerator

    mgr = CheckpointManager(run_dir, Accelerator(cpu=True), keep_last=1)
    expected = [] if step == "2" else ["step_2"]
    assert [p.name for p in complete_checkpoints(ck)] == expected
    picked = mgr.resolve_resume("auto")
    assert (picked.name if picked else None) == (expected[-1] if expected else None)
    if picked is not None:
        # The previous checkpoint loads into a freshly built model, optimizer and scheduler.
        from selectrust.model import load_policy
        from trainer.runtime.optim import build_optimizer, build_scheduler

        model, _ = load_policy(acc_cfg.model, seed=acc_cfg.seed)
        opt = build_optimizer(model, acc_cfg.optim)
        sched = build_scheduler(opt, acc_cfg.optim, max_steps=acc_cfg.trainer.max_steps)
        state = mgr.load(picked, model=model, optimizer=opt, scheduler=sched)
        assert state["step"] == 2 and sched.last_epoch == 2 and len(opt.state) > 0
        with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
            mgr.resolve_resume(str(leftover))

    # Resume with the same command (resume=auto): exact versus the uninterrupted run.
    res = run_recipe("dpo", "dpo", _overrides(pairs, run_dir))
    assert res.step == 6
    a, b = dh.step_rows(ref_dir), dh.step_rows(run_dir)
    assert [l["step"] for l in b] == list(range(1, 7))          # the killed run's steps 3-4 logged once
    dh.assert_same_steps(a, b, tol=1e-6)
    dh.safetensors_equal(ref_dir / "final" / "adapter_model.safetensors",
                         run_dir / "final" / "adapter_model.safetensors")
    assert [p.name for p in complete_checkpoints(ck)] == ["step_6"]    # keep_last=1, after completion
    assert not list(ck.glob(".tmp-*"))
    assert json.loads((run_dir / "run_complete.json").read_text())["step"] == 6
