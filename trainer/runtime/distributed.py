"""The few collectives the trainers use, each a no-op on one process.

``acc`` is the run's ``accelerate.Accelerator``. Every rank must make the same call (they are
collective); on one process each returns its input without touching ``torch.distributed``.
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.distributed as dist


def uses_deepspeed(acc=None) -> bool:
    """Whether this run trains under DeepSpeed: ``acc``'s distributed type once the accelerator exists;
    before (``acc=None``), whether ``accelerate launch`` was given a DeepSpeed config (it sets
    ``ACCELERATE_USE_DEEPSPEED=true`` in every rank)."""
    if acc is not None:
        return str(acc.distributed_type).endswith("DEEPSPEED")
    return os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() in ("1", "true", "yes")


def all_gather_object(acc, obj: Any) -> list[Any]:
    """``[obj of rank 0, obj of rank 1, ...]`` on every rank (any picklable object)."""
    if acc.num_processes == 1:
        return [obj]

    out: list[Any] = [None] * acc.num_processes
    dist.all_gather_object(out, obj)
    return out


def reduce_sum(acc, x: float) -> float:
    """The sum of ``x`` over ranks."""
    if acc.num_processes == 1:
        return float(x)
    return float(acc.reduce(torch.tensor([float(x)], device=acc.device), reduction="sum").item())


def reduce_max(acc, n: int) -> int:
    """The largest ``n`` over ranks."""
    if acc.num_processes == 1:
        return n
    return int(acc.gather(torch.tensor([n], device=acc.device)).max().item())


def any_rank(acc, flag: bool) -> bool:
    """True on every rank when ``flag`` is true on any."""
    return reduce_sum(acc, 1.0 if flag else 0.0) > 0
