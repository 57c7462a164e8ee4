"""What every trainer's data shares: the samplers (the condition-mass sampler of DPO, the shuffle sampler of SFT,
GRPO and distillation, length grouping, the sampler as a batch source), the one length policy
(:func:`truncation_policy`) and :func:`keep_whole_items`. Each trainer's own rows are in its package: DPO's pairs
in ``trainer/dpo/data.py``, SFT's examples in ``trainer/sft/data.py``, GRPO's prompts in ``trainer/rl/rollout.py``,
distillation's views in ``trainer/distill/views.py``.

Every loader takes a data path through :func:`resolve_data_path` (:mod:`selectrust.core.data_sources`): a
path ``<scheme>:<rest>`` of a registered data source resolves to the file that source provides.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Callable, Sequence

import numpy as np

from selectrust.core.io import DataError
from selectrust.conditions import UNKNOWN_POOLS
from selectrust.conditions import condition_mass, pool_mass  # noqa: F401 - the samplers' masses, imported from here too

from selectrust.core.data_sources import resolve_data_path  # noqa: F401 - the loaders' path resolution, imported from here


# -- samplers -------------------------------------------------------------------------------------
def length_grouped_order(lengths: Sequence[int], *, block: int, blocks_per_chunk: int, rng,
                         within_window: bool = True) -> np.ndarray:
    """Length-grouped order of a sequence of draws: a permutation of ``range(len(lengths))``.

    The draws are cut into windows of ``block * blocks_per_chunk`` (``block`` = the global micro-batch
    size); each window is sorted by length (stable) and cut into blocks of ``block``, and the blocks are
    shuffled with ``rng``: within their window (each window keeps exactly its draws, so a run that stops
    mid-epoch makes the same draws as without grouping), or with ``within_window=False`` across all
    windows (SFT's original scheme). The multiset of draws is unchanged (so is every sampling mass), each
    micro-batch holds draws of similar length, and the result is a pure function of the inputs and the
    RNG state: seeded, and the same on every rank. The one grouping routine of SFT, DPO and (later)
    distillation batches."""
    lengths = np.asarray(lengths)
    window = block * blocks_per_chunk
    blocks, out = [], []
    for start in range(0, len(lengths), window):
        part = np.arange(start, min(start + window, len(lengths)))
        part = part[np.argsort(lengths[part], kind="stable")]
        blocks += [part[i:i + block] for i in range(0, len(part), block)]
        if within_window:
            out += [blocks[i] for i in rng.permutation(len(blocks))]
            blocks = []
    out += [blocks[i] for i in rng.permutation(len(blocks))] if blocks else []
    return np.concatenate(out) if out else np.arange(0)


def check_pool_mass(pools, mass: dict[str, float]) -> None:
    """Every pool with positive mass must hold pairs (``pools``: anything with ``pool in pools`` and
    ``len(pools[pool])``); run before any model loads."""
    for c, m in mass.items():
        if m > 0 and not pools.get(c):
            raise DataError(f"pool {c!r} has sampling mass {m:g} but the data has no {c} pairs"
                            + (" (mine with knowledge.enabled=true)" if c in UNKNOWN_POOLS else ""))


class ConditionSampler:
    """Draws pair indices with the configured mass over condition pools.

    ``mode='sample'`` (the paper): each draw picks a condition with probability ``mass[c]`` and then
    the next pair of that pool (pools are reshuffled every time they are exhausted).
    ``mode='loss'``: a uniform shuffle of all rows; each row carries weight ``mass[c] / (n_c / N)`` so
    the expected loss equals Σ_c mass[c] L_c. An epoch is N = (number of rows) draws either way.

    The draw sequence of epoch e is a pure function of (seed, e), so the state is just
    ``(epoch, position)``: exact resume needs no RNG state.

    With ``lengths`` (one per row) and ``block`` (the global micro-batch size), each epoch's draws are
    regrouped by :func:`length_grouped_order` (windows of ``blocks_per_chunk`` micro-batches sorted by
    length, cut, and the micro-batches shuffled): the same draws, hence the same per-condition mass.
    """

    def __init__(self, conditions: Sequence[str], mass: dict[str, float], *, seed: int, mode: str = "sample",
                 lengths: Sequence[int] | None = None, block: int = 1, blocks_per_chunk: int = 16):
        if lengths is not None and len(lengths) != len(conditions):
            raise ValueError(f"lengths has {len(lengths)} entries for {len(conditions)} rows")
        self.lengths = None if lengths is None else np.asarray(lengths)
        self.block = block
        self.blocks_per_chunk = blocks_per_chunk
        self.conditions = list(conditions)
        self.mass = dict(mass)
        self.seed = seed
        self.mode = mode
        self.pools: dict[str, list[int]] = defaultdict(list)
        for i, c in enumerate(self.conditions):
            self.pools[c].append(i)
        check_pool_mass(self.pools, self.mass)
        self.n = len(self.conditions)
        self.epoch = 0
        self.position = 0
        self._plan: list[tuple[int, float]] | None = None

    def _epoch_plan(self, epoch: int) -> list[tuple[int, float]]:
        rng = np.random.default_rng([self.seed, epoch])
        plan = self._draw_plan(rng)
        if self.lengths is not None and self.block > 1:
            order = length_grouped_order(self.lengths[[i for i, _ in plan]], block=self.block,
                                         blocks_per_chunk=self.blocks_per_chunk, rng=rng)
            plan = [plan[k] for k in order]
        return plan

    def _draw_plan(self, rng) -> list[tuple[int, float]]:
        if self.mode == "loss":
            counts = {c: len(ix) for c, ix in self.pools.items()}
            weight = {c: (self.mass.get(c, 0.0) / (counts[c] / self.n)) if counts[c] else 0.0 for c in counts}
            order = rng.permutation(self.n)
            return [(int(i), weight[self.conditions[i]]) for i in order if weight[self.conditions[i]] > 0]
        names = [c for c in sorted(self.mass) if self.mass[c] > 0]
        p = np.array([self.mass[c] for c in names], dtype=float)
        picks = rng.choice(len(names), size=self.n, p=p / p.sum())
        cursors = {c: 0 for c in names}
        perms = {c: list(rng.permutation(self.pools[c])) for c in names}
        plan = []
        for k in picks:
            c = names[k]
            if cursors[c] == len(perms[c]):
                perms[c] = list(rng.permutation(self.pools[c]))
                cursors[c] = 0
            plan.append((int(perms[c][cursors[c]]), 1.0))
            cursors[c] += 1
        return plan

    def draw(self, k: int) -> list[tuple[int, float]]:
        """The next ``k`` (row index, weight) draws; crossing an epoch end increments ``epoch``."""
        out = []
        while len(out) < k:
            if self._plan is None:
                self._plan = self._epoch_plan(self.epoch)
            take = self._plan[self.position:self.position + (k - len(out))]
            out.extend(take)
            self.position += len(take)
            if self.position >= len(self._plan):
                self.epoch += 1
                self.position = 0
                self._plan = None
        return out

    def state_dict(self) -> dict:
        return {"epoch": self.epoch, "position": self.position}

    def load_state_dict(self, state: dict) -> None:
        self.epoch, self.position = int(state["epoch"]), int(state["position"])
        self._plan = None


class ShuffleSampler(ConditionSampler):
    """Uniform reshuffle each epoch (SFT): the condition sampler with one pool and full mass.

    With ``lengths`` (one per example) and ``block`` (the global micro-batch size), each epoch's
    permutation is cut into chunks of ``block * blocks_per_chunk`` examples, each chunk is sorted by
    length and split into blocks, and the blocks are shuffled: micro-batches hold examples of similar
    length (little padding) while their order stays random. Still a pure function of (seed, epoch)."""

    def __init__(self, n: int, *, seed: int, lengths: Sequence[int] | None = None, block: int = 1,
                 blocks_per_chunk: int = 16):
        super().__init__(["all"] * n, {"all": 1.0}, seed=seed, mode="sample", lengths=lengths, block=block,
                         blocks_per_chunk=blocks_per_chunk)

    def _epoch_plan(self, epoch: int) -> list[tuple[int, float]]:
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(self.n)
        if self.lengths is not None and self.block > 1:
            order = order[length_grouped_order(self.lengths[order], block=self.block, within_window=False,
                                               blocks_per_chunk=self.blocks_per_chunk, rng=rng)]
        return [(int(i), 1.0) for i in order]


class SamplerSource:
    """Batch source over a dataset: draws a *global* micro-batch (``batch_size * world``) and keeps
    this rank's slice, so a 2-rank run sees exactly the examples of a 1-rank run with twice the batch."""

    def __init__(self, sampler: ConditionSampler, collate, *, batch_size: int, rank: int = 0, world: int = 1):
        self.sampler = sampler
        self.collate = collate
        self.batch_size = batch_size
        self.rank = rank
        self.world = world

    @property
    def epoch(self) -> int:
        return self.sampler.epoch

    def next_microbatch(self) -> dict:
        draws = self.sampler.draw(self.batch_size * self.world)
        mine = draws[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]
        return self.collate([i for i, _ in mine], [w for _, w in mine])

    def state_dict(self) -> dict:
        return self.sampler.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self.sampler.load_state_dict(state)


def truncation_policy(rows: Sequence, measure: Callable[[Any], tuple[Any, tuple[str, str] | None]], *,
                      truncation: str, what: str, path: str | None = None) -> tuple[list, int]:
    """``data.truncation`` over ``rows``, once, up front (the one length policy of every trainer).
    ``measure(row) -> (row, over)``: the row to keep (possibly bounded or annotated) and ``None`` when it
    fits, else ``(message, field)`` describing the excess. ``keep_end``/``keep_start`` keep over-long rows
    (the collator cuts them), ``drop`` removes them, ``error`` raises a DataError naming the first one.
    Returns the kept rows and how many were dropped; no row left is an error naming ``what``."""
    keep, dropped = [], 0
    for row in rows:
        row, over = measure(row)
        if over is not None:
            if truncation == "error":
                raise DataError(over[0], path=path, field=over[1], accepted="set data.truncation to keep_end, keep_start or drop")
            if truncation == "drop":
                dropped += 1
                continue
        keep.append(row)
    if not keep:
        raise DataError(f"every {what} exceeds the length limits", path=path)
    return keep, dropped


def keep_whole_items(rows: list[dict], max_rows: int | None) -> list[dict]:
    """At most ``max_rows`` rows, whole items only, in file order (``None``: all)."""
    if max_rows is not None and len(rows) > max_rows:
        keep_items: list[str] = []
        count = 0
        for r in rows:  # whole items only, in file order
            if r["item_id"] not in keep_items:
                if count >= max_rows:
                    break
                keep_items.append(r["item_id"])
            count += 1
        keep = set(keep_items)
        rows = [r for r in rows if r["item_id"] in keep]
    return rows
