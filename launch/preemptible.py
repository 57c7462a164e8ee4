"""Run a training command so that a SIGTERM or SIGUSR1 sent to *this* process preempts it cleanly.

    python launch/preemptible.py accelerate launch --config_file launch/ddp.yaml recipes/dpo.py ...
    kill -TERM <pid of preemptible.py>      # -> the ranks checkpoint, every process exits 0

Why: a signal to `accelerate launch` itself reaches the torchrun agent, which forwards SIGTERM to the
ranks (they save a checkpoint and exit 0) but then exits 1 itself (it raises ``SignalException`` for the
signal it received), so a scheduler sees a failed job. Here the signal is forwarded to the *ranks*
only, the processes the command started (for `accelerate launch`: the children of the launcher
process, where the agent runs in-process; for `python recipes/x.py`: that process itself), exactly as
Slurm with ``proctrack/cgroup`` signals every rank. The agent then sees its workers finish with 0 and
exits 0; this wrapper exits with the command's exit code (128 + N if it died of signal N).

Useful where only the main process of a job gets the signal (Kubernetes/Docker send SIGTERM to PID 1,
``kill <pid>``, a supervisor). Linux only (reads ``/proc/<pid>/task/*/children``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

FORWARDED = (signal.SIGTERM, signal.SIGUSR1)  # the trainers' preemption signals (trainer/runtime/loop.py)


def children(pid: int) -> list[int]:
    """Direct children of ``pid`` (Linux ``/proc``); [] when it has none or is gone."""
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(x) for x in (task / "children").read_text().split()]
        except OSError:
            continue
    return out


def targets(pid: int) -> list[int]:
    """Where a signal goes: the command's children (the ranks under `accelerate launch` / torchrun), or
    the command itself when it started none (a plain ``python recipes/x.py``)."""
    return children(pid) or [pid]


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0 if argv else 2
    proc = subprocess.Popen(argv)

    def forward(signum, frame):
        pids = targets(proc.pid)
        for pid in pids:
            try:
                os.kill(pid, signum)
            except ProcessLookupError:
                pass
        print(f"[preemptible] {signal.Signals(signum).name} forwarded to {pids}", file=sys.stderr, flush=True)

    for sig in FORWARDED:
        signal.signal(sig, forward)
    rc = proc.wait()
    return 128 - rc if rc < 0 else rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
