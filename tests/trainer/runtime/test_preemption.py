"""Preemption on 2 ranks (slow): a 2-rank gloo DDP DPO run gets SIGTERM or SIGUSR1 mid-run; every
rank finishes the current optimizer step, the ranks agree, exactly one checkpoint is saved (at the last
logged step, with both ranks' RNG state), every process exits 0 and no run_complete.json is written.
Running the same command again resumes and completes the run.

- SIGTERM to both ranks (what Slurm/Kubernetes do on preemption), then the resume;
- SIGUSR1 to rank 1 only: rank 0 never saw a signal, yet it stops at the same step (the flag is
  all-reduced after every step);
- SIGTERM to the `accelerate launch` process only: torchrun forwards it to the ranks (the launcher
  itself then exits 1);
- SIGTERM to `launch/preemptible.py` wrapping `accelerate launch`: it signals the ranks, and every
  process, the wrapper included, exits 0.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

import dist_helpers as dh
from trainer.runtime.checkpoint import complete_checkpoints

pytestmark = pytest.mark.slow
psutil = pytest.importorskip("psutil")

MAX_STEPS = 30


def _cmd(run_dir):
    return dh.command("dpo", ["eval=none", f"trainer.run_dir={run_dir}", "trainer.device=cpu", "trainer.progress=false",
                              f"trainer.max_steps={MAX_STEPS}", "trainer.save_every=0", "optim.batch_size=2"],
                      accelerate_config="cpu_ddp.yaml")


def _ranks(launcher: subprocess.Popen, timeout: float = 60) -> dict[int, psutil.Process]:
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = {}
        for p in psutil.Process(launcher.pid).children(recursive=True):
            try:
                rank = p.environ().get("RANK")
                if rank is not None and any("dpo.py" in a for a in p.cmdline()):
                    found[int(rank)] = p
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        if len(found) == 2:
            return found
        time.sleep(0.2)
    raise AssertionError("did not find the two rank processes")


def _wait_for_steps(run_dir, launcher, n: int, timeout: float = 180) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (run_dir / "metrics.jsonl").exists() and len(dh.step_rows(run_dir)) >= n:
            return
        if launcher.poll() is not None:
            raise AssertionError(f"the run ended (exit {launcher.returncode}) before step {n}")
        time.sleep(0.1)
    raise AssertionError(f"no step {n} within {timeout} s")


def _preempt(tmp_path, deliver, *, wrapper: bool = False) -> tuple:
    run_dir = tmp_path / "run"
    log = open(tmp_path / "launch.log", "w")
    cmd = _cmd(run_dir)
    if wrapper:
        cmd = [sys.executable, str(dh.LAUNCH / "preemptible.py"), *cmd]
    launcher = subprocess.Popen(cmd, env=dh.env(), cwd=dh.REPO, stdout=log, stderr=subprocess.STDOUT)
    try:
        ranks = _ranks(launcher)
        _wait_for_steps(run_dir, launcher, 2)
        deliver(launcher, ranks)
        rc = launcher.wait(timeout=150)
    finally:
        if launcher.poll() is None:
            launcher.kill()
        log.close()
    out = (tmp_path / "launch.log").read_text()
    return run_dir, rc, out


def _check_one_checkpoint(run_dir, out):
    rows = dh.step_rows(run_dir)
    last = rows[-1]["step"]
    assert 2 <= last < MAX_STEPS
    assert [l["step"] for l in rows] == list(range(1, last + 1))
    ck = complete_checkpoints(run_dir / "checkpoints")
    assert [p.name for p in ck] == [f"step_{last}"]                # exactly one, at the step both ranks finished
    assert not list((run_dir / "checkpoints").glob(".tmp-*"))
    assert json.loads((ck[0] / "trainer_state.json").read_text())["step"] == last
    assert (ck[0] / "rng_rank0.json").exists() and (ck[0] / "rng_rank1.json").exists()
    assert not (run_dir / "run_complete.json").exists() and not (run_dir / "final").exists()
    assert f"preemption signal: saved step {last}, exiting cleanly" in out
    return last


def test_sigterm_to_both_ranks_checkpoints_exits_0_and_resumes(tmp_path):
    def deliver(launcher, ranks):
        for p in ranks.values():
            p.send_signal(signal.SIGTERM)

    run_dir, rc, out = _preempt(tmp_path, deliver)
    assert rc == 0, out[-3000:]   # torchrun exits 0 only if every rank did
    last = _check_one_checkpoint(run_dir, out)
    # The same command again: resume=auto continues from the checkpoint to max_steps.
    r = dh.run(_cmd(run_dir))
    assert f"resumed from {run_dir / 'checkpoints' / f'step_{last}'} at step {last}" in r.stdout + r.stderr
    assert [l["step"] for l in dh.step_rows(run_dir)] == list(range(1, MAX_STEPS + 1))
    assert json.loads((run_dir / "run_complete.json").read_text())["step"] == MAX_STEPS
    assert json.loads((run_dir / "meta.json").read_text())["world_size"] == 2


def test_sigusr1_to_one_rank_stops_both_at_the_same_step(tmp_path):
    def deliver(launcher, ranks):
        ranks[1].send_signal(signal.SIGUSR1)

    run_dir, rc, out = _preempt(tmp_path, deliver)
    assert rc == 0, out[-3000:]   # torchrun exits 0 only if every rank did
    _check_one_checkpoint(run_dir, out)


def test_sigterm_to_the_launcher_is_forwarded_to_the_ranks(tmp_path):
    def deliver(launcher, ranks):
        launcher.send_signal(signal.SIGTERM)

    run_dir, rc, out = _preempt(tmp_path, deliver)
    # torchrun's agent forwarded SIGTERM ("closing signal SIGTERM"); the ranks checkpointed and exited
    # within its shutdown timeout (it never escalated to SIGKILL). The agent itself then exits 1,
    # raising SignalException for the signal it received (torch.distributed.elastic behaviour).
    assert "closing signal SIGTERM" in out and "SIGKILL" not in out, out[-3000:]
    assert rc != 0
    _check_one_checkpoint(run_dir, out)


def test_sigterm_to_the_preemptible_wrapper_exits_0(tmp_path):
    def deliver(launcher, ranks):
        launcher.send_signal(signal.SIGTERM)  # the wrapper, as Kubernetes/`kill <pid>` would

    run_dir, rc, out = _preempt(tmp_path, deliver, wrapper=True)
    assert "[preemptible] SIGTERM forwarded to" in out
    assert "closing signal" not in out and "SignalException" not in out, out[-3000:]  # the agent got no signal
    assert rc == 0, out[-3000:]
    _check_one_checkpoint(run_dir, out)
