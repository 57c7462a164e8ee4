"""Where a rollout's work happens: the seed of each prompt (rank-independent, :func:`prompt_seed`), the share of a
round's prompts each rank generates (:func:`share`), the rows of the global batch each rank trains on
(:func:`rank_rows`) and this process's place among the ranks (:class:`Ranks`). ``trainer/rl/rollout.py``'s module
docstring says why a W-rank run equals a 1-rank run; it also exports these names."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable
from selectrust.generation.backends.base import derive_seed
from functools import partial


def prompt_seed(seed: int, rollout_index: int, round_index: int, prompt_index: int) -> int:
    """Generation seed of one prompt: a stable hash of (seed, rollout batch, refill round, the prompt's
    index in the round's global draw). Rank-independent by construction."""
    return derive_seed("rollout", seed, rollout_index, round_index, prompt_index)


def share(n: int, rank: int, world: int) -> tuple[int, int]:
    """The contiguous share ``[lo, hi)`` of ``n`` items that ``rank`` of ``world`` handles (sizes differ
    by at most one; a rank may get none)."""
    return n * rank // world, n * (rank + 1) // world


def rank_rows(n: int, rank: int, world: int, grad_accum: int) -> list[int]:
    """Indices of the global batch's ``n`` samples that ``rank`` trains on: its slice of every global
    micro-batch (micro-batch ``i`` = ``[i*W*b, (i+1)*W*b)``, rank ``r`` gets ``[(i*W+r)*b, (i*W+r+1)*b)``
    with ``b = n / (grad_accum * world)``), in micro-batch order."""
    if n % (grad_accum * world):
        raise ValueError(f"{n} samples do not split into grad_accum={grad_accum} x world={world} equal micro-batches")
    b = n // (grad_accum * world)
    return [k for i in range(grad_accum) for k in range((i * world + rank) * b, (i * world + rank + 1) * b)]


@dataclass
class Ranks:
    """This process's place among the ranks that build one global batch together: ``all_gather(obj) ->
    [obj of rank 0, ..., obj of rank W-1]`` (``torch.distributed.all_gather_object``; may be None on one
    process) exchanges the generated groups and the old log-probs (see the module docstring)."""

    rank: int = 0
    world: int = 1
    all_gather: Callable[[Any], list] | None = None

    @classmethod
    def of(cls, accelerator) -> "Ranks":
        from trainer.runtime.distributed import all_gather_object  # deferred: imports torch

        return cls(accelerator.process_index, accelerator.num_processes, partial(all_gather_object, accelerator))
