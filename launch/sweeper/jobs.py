"""A sweep job (its swept values, run directory and command), the files the sweep reads and writes in that
directory, and the job's status read back from them."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

RUN_DIR_KEY = "trainer.run_dir"
COMPLETE_MARKER = "run_complete.json"
STATUS_FILE = "launch_status.json"
LOG_FILE = "launch.log"


class SweepError(ValueError):
    """A sweep specification that cannot be expanded; the message says which override and why."""


@dataclass
class Job:
    name: str
    swept: dict[str, str]          # override key (as typed, e.g. "algo.beta" or "+x") -> Hydra value string
    run_dir: Path
    command: list[str] = field(default_factory=list)
    shell: str = ""                # the same command as shell text (accelerate args kept verbatim)

    @property
    def overrides(self) -> list[str]:
        return [f"{k}={v}" for k, v in self.swept.items()]


def read_complete(run_dir: Path) -> Optional[dict[str, Any]]:
    path = Path(run_dir) / COMPLETE_MARKER
    if not path.is_file():
        return None
    try:
        record = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None
    return record if isinstance(record, dict) else None


def job_status(job: Job) -> str:
    """``done`` (run_complete.json present), ``failed`` (launched, not complete) or ``missing`` (never launched)."""
    if read_complete(job.run_dir) is not None:
        return "done"
    if (job.run_dir / LOG_FILE).exists() or (job.run_dir / STATUS_FILE).exists():
        return "failed"
    return "missing"
