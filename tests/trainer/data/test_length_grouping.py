"""Length-grouped windows (``data.group_by_length``) over the condition sampler: the same draws (so the
same per-condition mass), micro-batches of similar length, seeded, resumable and rank-consistent."""

from collections import Counter

import numpy as np
import pytest

from trainer.data.train_data import ConditionSampler, SamplerSource, condition_mass, length_grouped_order

MASS = condition_mass(lambda_m=0.4, lambda_c=0.2, lambda_p=0.4, rho=0.5)


def _rows(n=96, seed=0):
    rng = np.random.default_rng(seed)
    conds = [("clean", "misleading", "correct", "irrelevant")[i % 4] for i in range(n)]
    return conds, [int(x) for x in rng.integers(30, 400, size=n)]


def test_length_grouped_order_by_hand():
    """lengths (5, 1, 4, 2, 3, 6), block 2, one window of 3 blocks: sorted positions (1, 3, 4, 2, 0, 5) cut
    into blocks {1, 3}, {4, 2}, {0, 5}, then shuffled; two windows of one block each keep their pairs."""
    lengths = [5, 1, 4, 2, 3, 6]
    order = length_grouped_order(lengths, block=2, blocks_per_chunk=3, rng=np.random.default_rng(0))
    assert sorted(order.tolist()) == list(range(6))
    blocks = [tuple(order[i:i + 2].tolist()) for i in range(0, 6, 2)]
    assert sorted(blocks) == [(0, 5), (1, 3), (4, 2)]
    order = length_grouped_order(lengths, block=2, blocks_per_chunk=1, rng=np.random.default_rng(0))
    assert sorted(tuple(order[i:i + 2].tolist()) for i in range(0, 6, 2)) == [(1, 0), (3, 2), (4, 5)]


@pytest.mark.parametrize("mode", ["sample", "loss"])
def test_grouping_keeps_the_draws_and_cuts_padding(mode):
    conds, lengths = _rows()
    plain = ConditionSampler(conds, MASS, seed=3, mode=mode)
    grouped = ConditionSampler(conds, MASS, seed=3, mode=mode, lengths=lengths, block=4, blocks_per_chunk=4)
    window = 4 * 4
    pad = {"plain": 0, "grouped": 0}
    for _ in range(3):  # three epochs
        a, b = plain.draw(len(conds)), grouped.draw(len(conds))
        assert a != b
        for w in range(0, len(a), window):  # every window holds exactly the same draws (and weights)
            assert Counter(a[w:w + window]) == Counter(b[w:w + window])
        per_cond = [Counter(conds[i] for i, _ in x) for x in (a, b)]
        assert per_cond[0] == per_cond[1]
        for name, draws in (("plain", a), ("grouped", b)):
            for m in range(0, len(draws), 4):
                ls = [lengths[i] for i, _ in draws[m:m + 4]]
                pad[name] += max(ls) * len(ls) - sum(ls)
    assert pad["grouped"] < 0.5 * pad["plain"]


def test_grouped_sampler_resumes_exactly_and_is_rank_consistent():
    conds, lengths = _rows(n=50)
    kw = dict(seed=7, lengths=lengths, block=4, blocks_per_chunk=3)
    ref = ConditionSampler(conds, MASS, **kw).draw(137)  # crosses two epoch ends
    first = ConditionSampler(conds, MASS, **kw)
    head = first.draw(61)
    resumed = ConditionSampler(conds, MASS, **kw)
    resumed.load_state_dict(first.state_dict())
    assert head + resumed.draw(137 - 61) == ref

    def source(rank, world, batch):
        return SamplerSource(ConditionSampler(conds, MASS, **kw), lambda ix, w: ix, batch_size=batch, rank=rank,
                             world=world)

    one = source(0, 1, 4)
    ranks = [source(r, 2, 2) for r in range(2)]
    for _ in range(20):
        assert one.next_microbatch() == ranks[0].next_microbatch() + ranks[1].next_microbatch()
