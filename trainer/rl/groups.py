"""A rollout group and the drop/refill rule (pure python; tested with a fake generator): one sample
(:class:`Rollout`), the G samples of one prompt (:class:`Group`) and :func:`fill_batch`, which drops zero-variance
groups and refills the batch. The batch source ``trainer/rl/rollout.py`` builds on them (and exports the names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


@dataclass
class Rollout:
    """One sample: the tokens to train on and its outcome."""

    item_id: str
    input_ids: list[int]
    completion_mask: list[int]
    reward: float
    reward_ok: bool = True
    truncated: bool = False
    completion_len: int = 0
    rollout_logps: list[float] | None = None  # backend log-probs at the completion_mask positions
    answer_status: str | None = None  # the judge's reading (trainer.rl.rewards.judge_status); None: not judged

    def to_json(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Group:
    item_id: str
    samples: list[Rollout]

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.samples]

    @property
    def zero_variance(self) -> bool:
        r = self.rewards
        return all(x == r[0] for x in r)


def fill_batch(generate_round: Callable[[int, int], list[Group]], *, num_groups: int, max_refill_rounds: int,
               drop_zero_variance: bool, first_round: int | None = None) -> tuple[list[Group], dict]:
    """Collect ``num_groups`` groups. ``generate_round(n, r)`` returns ``n`` fresh groups for round ``r``.

    Round 0 asks for ``first_round`` groups (``>= num_groups``, default ``num_groups``; over-sampled by
    ``trainer.rl.oversample.first_round_size``); with ``drop_zero_variance`` the groups whose rewards all agree are
    dropped, kept ones beyond ``num_groups`` are surplus (not trained on), and rounds 1..``max_refill_rounds`` each
    ask for the number still missing; still short, dropped groups top the batch up (advantage 0). With several ranks
    this runs on the *global* groups, so every rank takes the same decisions. Returns the groups (kept first, in
    generation order) and counts: ``groups_generated``, ``groups_dropped``, ``groups_refilled``, ``refill_rounds``,
    ``groups_padded_zero_variance``, ``zero_variance_frac`` (of round 0), ``zero_variance_groups`` (all rounds),
    ``rounds``, ``groups_oversampled`` (round 0 beyond ``num_groups``), ``groups_surplus``.
    """
    if num_groups < 1:
        raise ValueError(f"num_groups must be >= 1, got {num_groups}")
    first_round = num_groups if first_round is None else first_round
    if first_round < num_groups:
        raise ValueError(f"first_round={first_round} must be >= num_groups={num_groups}")
    kept: list[Group] = []
    dropped: list[Group] = []
    stats = {"groups_generated": 0, "groups_dropped": 0, "groups_refilled": 0, "refill_rounds": 0,
             "groups_padded_zero_variance": 0, "zero_variance_frac": 0.0, "zero_variance_groups": 0, "rounds": 0,
             "groups_oversampled": first_round - num_groups, "groups_surplus": 0}
    for rnd in range(max_refill_rounds + 1):
        need = (first_round if rnd == 0 else num_groups) - len(kept)
        if need <= 0:
            break
        groups = generate_round(need, rnd)
        if len(groups) != need:
            raise RuntimeError(f"generation round {rnd} returned {len(groups)} groups, expected {need}")
        stats["groups_generated"] += len(groups)
        stats["rounds"] += 1
        if rnd > 0:
            stats["refill_rounds"] += 1
        zv = [g.zero_variance for g in groups]
        stats["zero_variance_groups"] += sum(zv)
        if rnd == 0:
            stats["zero_variance_frac"] = sum(zv) / len(groups)
        for g, z in zip(groups, zv):
            if drop_zero_variance and z:
                dropped.append(g)
                stats["groups_dropped"] += 1
            elif len(kept) < num_groups:
                kept.append(g)
                stats["groups_refilled"] += rnd > 0
            else:
                stats["groups_surplus"] += 1
        if not drop_zero_variance:
            break
    if len(kept) < num_groups:
        pad = dropped[:num_groups - len(kept)]
        stats["groups_padded_zero_variance"] = len(pad)
        kept.extend(pad)
    return kept, stats
