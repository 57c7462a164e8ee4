"""Knowledgeable-R1's paired advantages (trainer/algos/paired_context.py): hand-worked values, the balance that
sets beta, its two fallbacks and its floor, the std scalings, a plain-loop cross-check and bad input."""

import random
import statistics

import pytest
import torch
from torch.testing import assert_close

from trainer.algos.paired_context import paired_context_advantages

TIGHT = {"rtol": 1e-6, "atol": 1e-6}
A = 0.5 / (3 ** -0.5 + 1e-4)  # (1, 1, 0, 0): mean 0.5, unbiased std sqrt(1/3) -> +-0.8658754
B, C = 0.25 / 0.5001, 0.75 / 0.5001  # (0, 0, 0, 1): mean 0.25, std 0.5 -> -0.4999, +1.4997
L = 0.5 / (0.5 ** 0.5 + 1e-4)  # (1, 0) within one regime: mean 0.5, std sqrt(0.5) -> +-0.7070068


def test_hand_values_and_the_balancing_beta():
    """Prompt 0: with (1, 1), without (0, 0); prompt 1: with (0, 0), without (0, 1).
    Global over each prompt's 4 rewards: prompt 0 (A, A, -A, -A), prompt 1 (-B, -B, -B, C); every local group is
    constant (0), so CK = global. E_CK = (2A - 2B) / 4, E_+ = C / 4, E_- = -(2A + B) / 4,
    beta = (E_CK - E_+) / E_- = 0.344027; the RPK rows scale the negative global advantages by beta."""
    w = torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    wo = torch.tensor([[0.0, 0.0], [0.0, 1.0]])
    adv_with, adv_without, adv_cross, m = paired_context_advantages(w, wo)
    assert_close(adv_with, torch.tensor([[A, A], [-B, -B]]), **TIGHT)
    assert_close(adv_without, torch.tensor([[-A, -A], [-B, C]]), **TIGHT)
    e_ck, e_pos, e_neg = (2 * A - 2 * B) / 4, C / 4, -(2 * A + B) / 4
    beta = (e_ck - e_pos) / e_neg
    assert beta == pytest.approx(0.344027, abs=1e-6)
    assert_close(adv_cross, torch.tensor([[-beta * A, -beta * A], [-beta * B, C]]), **TIGHT)
    for k, v in {"e_ck": e_ck, "e_pos": e_pos, "e_neg": e_neg, "beta": beta, "reward_with": 0.5,
                 "reward_without": 0.25, "context_helps_frac": 0.5, "context_hurts_frac": 0.5}.items():
        assert float(m[k]) == pytest.approx(v, abs=1e-6), k
    # the point of beta: the transformed RPK advantages have the CK rows' mean
    assert float(adv_cross.mean()) == pytest.approx(float(adv_with.mean()), abs=1e-6)


def test_local_advantages_add_to_the_context_rows_only():
    """Prompt: with (1, 0), without (1, 1): global (0.25, -0.75, 0.25, 0.25) / 0.5001; the with-context group adds
    its own (+-L); E_CK < 0 (the context hurts), so beta = 1 and the RPK rows equal the PK rows."""
    adv_with, adv_without, adv_cross, m = paired_context_advantages(torch.tensor([[1.0, 0.0]]),
                                                                    torch.tensor([[1.0, 1.0]]))
    g = torch.tensor([0.25, -0.75, 0.25, 0.25]) / 0.5001
    assert_close(adv_with, (g[:2] + torch.tensor([L, -L])).view(1, 2), **TIGHT)
    assert_close(adv_without, g[2:].view(1, 2), **TIGHT)
    assert float(m["e_ck"]) < 0 and float(m["beta"]) == 1.0
    assert torch.equal(adv_cross, adv_without)
    assert float(m["context_hurts_frac"]) == 1.0 and float(m["context_helps_frac"]) == 0.0


def test_beta_floor_and_zero_variance_pairs():
    """with (1, 1), without (1, 0): global (B', B', B', -3B') with B' = 0.25 / 0.5001; E_CK = B', E_+ = B' / 2,
    E_- = -3B' / 2: beta = (B' - B'/2) / (-3B'/2) = -1/3, floored at min_slope."""
    w, wo = torch.tensor([[1.0, 1.0]]), torch.tensor([[1.0, 0.0]])
    b = 0.25 / 0.5001
    for floor in (0.01, 0.5):
        _, adv_without, adv_cross, m = paired_context_advantages(w, wo, min_slope=floor)
        assert float(m["beta"]) == pytest.approx(floor)
        assert_close(adv_without, torch.tensor([[b, -3 * b]]), **TIGHT)
        assert_close(adv_cross, torch.tensor([[b, -3 * b * floor]]), **TIGHT)
    # all 2G rewards equal: no signal anywhere, and no negative advantage to scale (beta 1, not 0 / 0)
    outs = paired_context_advantages(torch.ones(1, 3), torch.ones(1, 3))
    assert all(torch.equal(x, torch.zeros(1, 3)) for x in outs[:3]) and float(outs[3]["beta"]) == 1.0


def test_std_scalings():
    """none: only centred. with (1, 0), without (0, 0): global (0.75, -0.25, -0.25, -0.25), local (0.5, -0.5);
    E_CK = 0.25, E_+ = 0, E_- = -0.25: beta = (0.25 - 0) / -0.25 = -1, floored at 0.01.
    batch: each centred group divided by the std of all 2PG rewards (0.5 for the 4 rewards 1, 0, 0, 0)."""
    w, wo = torch.tensor([[1.0, 0.0]]), torch.tensor([[0.0, 0.0]])
    adv_with, adv_without, adv_cross, m = paired_context_advantages(w, wo, std_scaling="none")
    assert_close(adv_with, torch.tensor([[1.25, -0.75]]), **TIGHT)
    assert_close(adv_without, torch.tensor([[-0.25, -0.25]]), **TIGHT)
    assert_close(adv_cross, torch.tensor([[-0.0025, -0.0025]]), **TIGHT)
    adv_with, adv_without, _, _ = paired_context_advantages(w, wo, std_scaling="batch")
    assert_close(adv_with, torch.tensor([[1.25, -0.75]]) / 0.5001, **TIGHT)
    assert_close(adv_without, torch.tensor([[-0.25, -0.25]]) / 0.5001, **TIGHT)


def _plain(w, wo, eps=1e-4, floor=0.01):
    """The module docstring's rule with python lists and statistics.stdev (group scaling)."""
    def z(xs):
        m, s = statistics.mean(xs), statistics.stdev(xs)
        return [(x - m) / (s + eps) for x in xs]

    G = len(w[0])
    glob = [z(a + b) for a, b in zip(w, wo)]
    ck = [[g + l for g, l in zip(gl[:G], z(a))] for gl, a in zip(glob, w)]
    pk = [gl[G:] for gl in glob]
    n = len(w) * G
    e_ck = sum(map(sum, ck)) / n
    e_pos, e_neg = sum(max(x, 0) for r in pk for x in r) / n, sum(min(x, 0) for r in pk for x in r) / n
    beta = 1.0 if e_ck < 0 or e_neg == 0 else max((e_ck - e_pos) / e_neg, floor)
    return ck, pk, [[x if x >= 0 else beta * x for x in r] for r in pk]


def test_matches_a_plain_loop_on_random_rewards():
    rng = random.Random(0)
    for P, G in ((1, 2), (3, 4), (5, 3)):
        w = [[rng.choice([0.0, 0.5, 1.0]) for _ in range(G)] for _ in range(P)]
        wo = [[rng.choice([0.0, 1.0]) for _ in range(G)] for _ in range(P)]
        got = paired_context_advantages(torch.tensor(w, dtype=torch.float64), torch.tensor(wo, dtype=torch.float64))
        for x, y in zip(got[:3], _plain(w, wo)):
            assert_close(x, torch.tensor(y, dtype=torch.float64), rtol=1e-9, atol=1e-9)


def test_bad_input():
    w = torch.zeros(2, 3)
    with pytest.raises(ValueError, match=r"must both be \(P, G\)"):
        paired_context_advantages(w, torch.zeros(2, 2))
    with pytest.raises(ValueError, match=r"must both be \(P, G\)"):
        paired_context_advantages(w.view(-1), torch.zeros(6))
    with pytest.raises(ValueError, match="std_scaling must be one of"):
        paired_context_advantages(w, w, std_scaling="rank")
    with pytest.raises(ValueError, match=r"min_slope must be in \(0, 1\]"):
        paired_context_advantages(w, w, min_slope=0.0)
    with pytest.raises(ValueError, match="NaN/inf"):
        paired_context_advantages(w, torch.full((2, 3), float("nan")))
