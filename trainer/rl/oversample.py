"""How many prompts a rollout batch's first generation round draws (``algo.oversample_cap``).

Groups whose G rewards all agree carry no signal and are dropped (``algo.drop_zero_variance``); a batch
short of ``P = algo.prompts_per_step`` groups used to be refilled round after round
(``algo.max_refill_rounds``), each round a generation call of a few groups. Instead, the first round
draws enough prompts to *expect* the batch full from the zero-variance rate seen so far::

    n_0 = min(floor(oversample_cap * P), ceil(P / (1 - z)))      (n_0 = P while nothing was seen, or z = 0)

with ``z`` the running rate: zero-variance groups / generated groups over every earlier rollout batch
of the run (all rounds). Refill rounds still top the batch up when the draw falls short, and the surplus
of a lucky draw is discarded (its groups are counted, never trained on), so the batch keeps exactly P
groups. The rate is computed from the global groups, identically on every rank, and saved with the batch
source (exact resume). ``oversample_cap = 1`` turns the over-sampling off.

Bounds (refused at config time, ``trainer/config/validation.py``): ``oversample_cap <= MAX_OVERSAMPLE_CAP``, since
as the rate nears 1 the draw grows as ``P / (1 - z)`` and a cap is all that stops one round from asking for
millions of prompts; and a round generates at most ``MAX_ROUND_COMPLETIONS`` completions
(``floor(cap * P) * G``), since every completion of a round is held in memory until its batch is built.

Public API:

- ``MAX_OVERSAMPLE_CAP``, ``MAX_ROUND_COMPLETIONS``, ``round_completions(cap, num_groups, group_size) -> int``
- ``first_round_size(num_groups, zero_variance_rate, cap) -> int``
- ``ZeroVarianceRate``: the running counts (``update(stats)``, ``rate``, ``state_dict``/``load_state_dict``)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["MAX_OVERSAMPLE_CAP", "MAX_ROUND_COMPLETIONS", "ZeroVarianceRate", "first_round_size", "round_completions"]

#: the largest ``algo.oversample_cap``: beyond 8x, a run whose groups nearly all agree is out of signal, and more
#: draws only buy generation time (``algo.zero_variance_skip`` passes such prompts over instead)
MAX_OVERSAMPLE_CAP = 8.0
#: the most completions one generation round may produce (``floor(oversample_cap * prompts_per_step) * group_size``)
MAX_ROUND_COMPLETIONS = 65536


def round_completions(cap: float, num_groups: int, group_size: int) -> int:
    """The completions of the largest round: ``floor(cap * num_groups)`` prompts (at least ``num_groups``) x ``group_size``."""
    return max(num_groups, math.floor(cap * num_groups)) * group_size


def first_round_size(num_groups: int, zero_variance_rate: float | None, cap: float) -> int:
    """Prompts the first round draws: ``ceil(num_groups / (1 - rate))`` clamped to
    ``[num_groups, floor(cap * num_groups)]``; ``num_groups`` when the rate is unknown (None) or 0."""
    if num_groups < 1:
        raise ValueError(f"num_groups must be >= 1, got {num_groups}")
    if not 1.0 <= cap <= MAX_OVERSAMPLE_CAP:
        raise ValueError(f"algo.oversample_cap must be >= 1 (1 = no over-sampling) and <= {MAX_OVERSAMPLE_CAP:g}; got {cap}")
    most = max(num_groups, math.floor(cap * num_groups))
    if zero_variance_rate is None or zero_variance_rate <= 0.0:
        return num_groups
    if zero_variance_rate >= 1.0:
        return most
    return min(most, max(num_groups, math.ceil(num_groups / (1.0 - zero_variance_rate) - 1e-9)))


@dataclass
class ZeroVarianceRate:
    """Zero-variance groups and generated groups over the rollout batches so far."""

    zero_variance: int = 0
    generated: int = 0

    @property
    def rate(self) -> float | None:
        """The running rate, or None before any group was generated."""
        return self.zero_variance / self.generated if self.generated else None

    def update(self, stats: dict) -> None:
        """Add one rollout batch's ``fill_batch`` counts (``zero_variance_groups``, ``groups_generated``)."""
        self.zero_variance += int(stats["zero_variance_groups"])
        self.generated += int(stats["groups_generated"])

    def state_dict(self) -> dict:
        return {"zero_variance": self.zero_variance, "generated": self.generated}

    def load_state_dict(self, state: dict) -> None:
        self.zero_variance, self.generated = int(state["zero_variance"]), int(state["generated"])
