"""Pass over prompts whose last group had zero variance (``algo.zero_variance_skip``).

A group whose G rewards all agree carries no signal: GRPO drops it (``algo.drop_zero_variance``) after paying for
its G rollouts. A prompt whose group agreed the last time it was drawn mostly agrees again (a fact the policy now
always gets right, or always wrong), so with ``zero_variance_skip = p > 0`` such a prompt is passed over with
probability ``p`` when the sampler next draws it, and the draw moves on to the next prompt of the epoch. A prompt
never drawn, or whose last group had variance, is always generated, and a passed-over prompt is drawn again next
epoch (and generated then with probability ``1 - p``, so a prompt that has become informative comes back).

This is GRESO's idea ("Act Only When It Pays: Efficient Reinforcement Learning for LLM Reasoning via Selective
Rollouts", Zheng et al., 2025). How it departs from it: GRESO keeps each prompt's zero-variance history over epochs
and adapts the skip probability to a target exploration rate; here only the last outcome counts and ``p`` is fixed.
The coin is a pure function of (seed, rollout batch, round, prompt index), so every rank takes the same decision
and a resumed run the same as an uninterrupted one (the outcomes are saved with the batch source's state).

Public API:

- ``ZeroVarianceMemory(prob, seed)``: ``skip(index, rollout_index, round_index) -> bool``,
  ``record(index, zero_variance)``, ``state_dict()`` / ``load_state_dict(state)``;
- ``draw_prompts(sampler, memory, n, *, rollout_index, round_index, max_skips) -> (row indices, passed over)``.
"""

from __future__ import annotations
from selectrust.generation.backends.base import derive_seed

__all__ = ["ZeroVarianceMemory", "draw_prompts"]


class ZeroVarianceMemory:
    """Each drawn prompt's last outcome (zero variance or not), and the seeded coin of :meth:`skip`."""

    def __init__(self, prob: float, seed: int):
        if not 0.0 <= prob <= 1.0:
            raise ValueError(f"algo.zero_variance_skip must be in [0, 1], got {prob}")
        self.prob, self.seed = float(prob), int(seed)
        self.last: dict[int, bool] = {}  # row index -> its last group had zero variance

    def skip(self, index: int, rollout_index: int, round_index: int) -> bool:
        """Pass over row ``index`` now: its last group had zero variance and the coin (probability ``prob``) says so."""
        if self.prob <= 0.0 or not self.last.get(int(index), False):
            return False

        coin = derive_seed("zero_variance_skip", self.seed, rollout_index, round_index, int(index)) / 2.0 ** 31
        return coin < self.prob

    def record(self, index: int, zero_variance: bool) -> None:
        self.last[int(index)] = bool(zero_variance)

    def state_dict(self) -> dict:
        return {"last": {str(k): v for k, v in sorted(self.last.items())}}

    def load_state_dict(self, state: dict) -> None:
        self.last = {int(k): bool(v) for k, v in state.get("last", {}).items()}


def draw_prompts(sampler, memory: ZeroVarianceMemory, n: int, *, rollout_index: int, round_index: int,
                 max_skips: int) -> tuple[list[int], int]:
    """The row indices of a round's ``n`` prompts: ``sampler``'s next draws (``draw(k) -> [(index, weight)]``),
    passing over those ``memory`` skips; at most ``max_skips`` are passed over (one epoch of rows: after that every
    draw is generated, so a dataset whose every prompt had zero variance still fills its rounds). Returns the
    indices and how many were passed over."""
    picks: list[int] = []
    skipped = 0
    while len(picks) < n:
        (i, _), = sampler.draw(1)
        if skipped < max_skips and memory.skip(i, rollout_index, round_index):
            skipped += 1
            continue
        picks.append(i)
    return picks, skipped
