"""The local launcher: the jobs one after another on this machine, skipping done ones, each job's output
appended to its ``launch.log``, stop signals forwarded to the running job."""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from typing import Any, Optional, Sequence

from launch.sweeper.jobs import COMPLETE_MARKER, LOG_FILE, STATUS_FILE, Job, read_complete


class _Forwarder:
    """While a job runs, SIGINT/SIGTERM/SIGUSR1 to the sweep become SIGTERM to the job's process group
    (the trainers checkpoint and exit 0 on SIGTERM; under `accelerate launch` the torchrun agent passes
    SIGTERM on to every rank). The sweep then stops launching new jobs."""

    def __init__(self):
        self.proc: Optional[subprocess.Popen] = None
        self.stopping: Optional[int] = None
        self._old: dict[int, Any] = {}

    def __enter__(self):
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGUSR1):
            self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc):
        for sig, h in self._old.items():
            signal.signal(sig, h)

    def _handle(self, signum, frame):
        self.stopping = signum
        print(f"[sweep] got {signal.Signals(signum).name}: stopping the current job (SIGTERM -> checkpoint) "
              f"and launching no more", flush=True)
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass


def run_job(job: Job, *, env: Optional[dict[str, str]] = None, tee: bool = False,
            forwarder: Optional[_Forwarder] = None, cwd: Optional[str] = None) -> int:
    """Run one job to completion, appending its output to ``<run_dir>/launch.log``; returns the exit code."""
    job.run_dir.mkdir(parents=True, exist_ok=True)
    log_path = job.run_dir / LOG_FILE
    started = time.time()
    with open(log_path, "ab") as log:
        header = (f"\n===== [sweep] {time.strftime('%Y-%m-%d %H:%M:%S')} launching {job.name}\n"
                  f"===== {shlex.join(job.command)}\n")
        log.write(header.encode())
        log.flush()
        proc = subprocess.Popen(job.command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env={**os.environ, **(env or {})}, cwd=cwd, start_new_session=True)
        if forwarder is not None:
            forwarder.proc = proc
        assert proc.stdout is not None
        for line in iter(proc.stdout.readline, b""):
            log.write(line)
            log.flush()
            if tee:
                sys.stdout.buffer.write(line)
                sys.stdout.flush()
        rc = proc.wait()
        if forwarder is not None:
            forwarder.proc = None
        log.write(f"===== [sweep] exit code {rc} after {time.time() - started:.1f}s\n".encode())
    status = {"returncode": rc, "started": started, "ended": time.time(), "command": job.command}
    (job.run_dir / STATUS_FILE).write_text(json.dumps(status, indent=2) + "\n")
    return rc


def run_local(jobs: Sequence[Job], *, env: Optional[dict[str, str]] = None, tee: bool = False,
              cwd: Optional[str] = None) -> dict[str, str]:
    """Run the jobs one after another, skipping done ones; returns ``{job: outcome}``
    with outcome one of ``skipped`` | ``done`` | ``failed`` | ``not run``."""
    outcome: dict[str, str] = {}
    with _Forwarder() as fwd:
        for i, job in enumerate(jobs, 1):
            if fwd.stopping is not None:
                outcome[job.name] = "not run"
                continue
            if read_complete(job.run_dir) is not None:
                print(f"[sweep] {i}/{len(jobs)} skip {job.name}: already complete "
                      f"({job.run_dir / COMPLETE_MARKER} exists)", flush=True)
                outcome[job.name] = "skipped"
                continue
            print(f"[sweep] {i}/{len(jobs)} run {job.name}  (log: {job.run_dir / LOG_FILE})", flush=True)
            t0 = time.time()
            rc = run_job(job, env=env, tee=tee, forwarder=fwd, cwd=cwd)
            ok = rc == 0 and read_complete(job.run_dir) is not None
            outcome[job.name] = "done" if ok else "failed"
            why = "" if ok else (f" (exit code {rc})" if rc != 0 else " (exit 0 but no run_complete.json)")
            print(f"[sweep] {i}/{len(jobs)} {outcome[job.name]} {job.name} in {time.time() - t0:.1f}s{why}",
                  flush=True)
    return outcome
