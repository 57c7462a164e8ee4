"""Group advantages, k3 KL and the clipped surrogate, with hand-worked values and plain loops."""

import math
import statistics

import pytest
import torch
from torch.testing import assert_close

from trainer.algos.grpo import clipped_policy_loss, group_advantages, k3_kl

TIGHT = {"rtol": 1e-6, "atol": 1e-7}
REWARDS = torch.tensor([1.0, 0.0, 0.0, 1.0,   1.0, 1.0, 1.0, 1.0,   0.0, 0.0, 0.0, 1.0])


def test_group_advantages_hand_values_with_zero_variance_group():
    """group_size 4, unbiased std, eps 1e-4:
    group 0 (1,0,0,1): mean 0.5, std = sqrt(4 * 0.25 / 3) = sqrt(1/3) -> A = +-0.5 / (0.5773503 + 1e-4) = +-0.8658754
    group 1 (1,1,1,1): std 0 -> A = 0, flagged zero-variance
    group 2 (0,0,0,1): mean 0.25, std = sqrt((3 * 0.0625 + 0.5625) / 3) = 0.5 -> A = -0.25/0.5001, 0.75/0.5001
    """
    adv, zero = group_advantages(REWARDS, 4, std_scaling="group")
    a, b, c = 0.8658754, 0.4999000, 1.4997001
    assert_close(adv, torch.tensor([a, -a, -a, a, 0, 0, 0, 0, -b, -b, -b, c]), **TIGHT)
    assert zero.tolist() == [False, True, False]


def test_group_advantages_batch_and_none_scaling():
    """batch: mean per group, std over all 12 rewards (7 ones): stdev = 0.5149287.
    none: only centred (Dr. GRPO)."""
    adv, zero = group_advantages(REWARDS, 4, std_scaling="batch")
    std = 0.5149287
    expected = torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0, -0.25, -0.25, -0.25, 0.75]) / (std + 1e-4)
    assert_close(adv, expected, **TIGHT)
    adv, zero = group_advantages(REWARDS, 4, std_scaling="none")
    assert_close(adv, torch.tensor([0.5, -0.5, -0.5, 0.5, 0, 0, 0, 0, -0.25, -0.25, -0.25, 0.75]))
    assert zero.tolist() == [False, True, False]


def test_group_advantages_match_plain_loop():
    g = torch.Generator().manual_seed(0)
    rewards = torch.rand(5 * 8, generator=g, dtype=torch.float64)
    adv, _ = group_advantages(rewards, 8, std_scaling="group", eps=1e-6)
    r = rewards.tolist()
    expected = []
    for i in range(5):
        grp = r[8 * i: 8 * i + 8]
        mu, sd = statistics.mean(grp), statistics.stdev(grp)
        expected += [(x - mu) / (sd + 1e-6) for x in grp]
    assert_close(adv, torch.tensor(expected, dtype=torch.float64))


def test_group_advantages_bad_input():
    with pytest.raises(ValueError, match="multiple of group_size=4"):
        group_advantages(torch.ones(6), 4)
    with pytest.raises(ValueError, match="multiple"):
        group_advantages(torch.ones(0), 4)
    with pytest.raises(ValueError, match="NaN"):
        group_advantages(torch.tensor([1.0, float("nan")]), 2)
    with pytest.raises(ValueError, match="std_scaling"):
        group_advantages(torch.ones(4), 2, std_scaling="global")


def test_k3_hand_values():
    """x = ref - logp: x = log 2 -> 2 - 0.6931472 - 1 = 0.3068528; x = log 0.5 -> 0.5 + 0.6931472 - 1 = 0.1931472;
    x = 0 -> 0."""
    logps = torch.zeros(3)
    ref = torch.tensor([math.log(2.0), math.log(0.5), 0.0])
    assert_close(k3_kl(logps, ref), torch.tensor([0.3068528, 0.1931472, 0.0]), **TIGHT)


def test_clipped_loss_hand_values_positive_and_negative_advantage():
    """old = 0, logps = log(1.5), log(0.5): ratios 1.5, 0.5; eps_low 0.2, eps_high 0.28 -> clip range [0.8, 1.28].
    A = +1: -min(1.5, 1.28) = -1.28 and -min(0.5, 0.8) = -0.5 -> token mean -0.89; clipped high on token 1.
            gradient w.r.t. logps: token 1 is clipped (0); token 2: -A * r / 2 = -0.25.
    A = -1: -min(-1.5, -1.28) = 1.5 and -min(-0.5, -0.8) = 0.8 -> token mean 1.15; clipped low on token 2;
            gradient: token 1: -A * r / 2 = 0.75; token 2 clipped (0).
    """
    old = torch.zeros(1, 2)
    for adv, exp_loss, exp_grad, low, high in [(1.0, -0.89, [0.0, -0.25], 0.0, 0.5),
                                               (-1.0, 1.15, [0.75, 0.0], 0.5, 0.0)]:
        logps = torch.tensor([[math.log(1.5), math.log(0.5)]], requires_grad=True)
        loss, m = clipped_policy_loss(logps, old, torch.tensor([adv]), torch.ones(1, 2), eps_low=0.2, eps_high=0.28)
        loss.backward()
        assert_close(loss, torch.tensor(exp_loss), **TIGHT)
        assert_close(logps.grad, torch.tensor([exp_grad]), **TIGHT)
        assert m["clip_frac_low"].item() == low and m["clip_frac_high"].item() == high
        assert m["clip_frac"].item() == 0.5
        assert_close(m["ratio_max"], torch.tensor(1.5))
        assert_close(m["ratio_min"], torch.tensor(0.5))


def test_token_mean_vs_sequence_mean_hand_values():
    """ratio 1 everywhere (logps == old) so l_t = -A. Row 0: A = 1, 1 token; row 1: A = -2, 3 tokens.
    token_mean (DAPO): (-1 + 3 * 2) / 4 = 1.25.  sequence_mean (GRPO): (-1 + 2) / 2 = 0.5.
    num_tokens = 10 (accumulation window): 5 / 10 = 0.5."""
    logps = torch.zeros(2, 3)
    mask = torch.tensor([[1, 0, 0], [1, 1, 1]])
    adv = torch.tensor([1.0, -2.0])
    kw = dict(eps_low=0.2, eps_high=0.2)
    assert_close(clipped_policy_loss(logps, logps, adv, mask, aggregation="token_mean", **kw)[0], torch.tensor(1.25))
    assert_close(clipped_policy_loss(logps, logps, adv, mask, aggregation="sequence_mean", **kw)[0],
                 torch.tensor(0.5))
    assert_close(clipped_policy_loss(logps, logps, adv, mask, num_tokens=10, **kw)[0], torch.tensor(0.5))


def test_kl_term_hand_value():
    """ratio 1, A = 0 -> policy term 0; k3 with ref - logp = log 2 on both tokens = 0.3068528;
    kl_beta 0.5 -> loss 0.1534264; metrics kl = 0.3068528."""
    logps = torch.zeros(1, 2)
    ref = torch.full((1, 2), math.log(2.0))
    loss, m = clipped_policy_loss(logps, logps, torch.zeros(1), torch.ones(1, 2), eps_low=0.2, eps_high=0.2,
                                  ref_logps=ref, kl_beta=0.5)
    assert_close(loss, torch.tensor(0.1534264), **TIGHT)
    assert_close(m["kl"], torch.tensor(0.3068528), **TIGHT)


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
def test_clipped_loss_matches_plain_loop(aggregation):
    g = torch.Generator().manual_seed(1)
    B, T = 5, 6
    old = -torch.rand(B, T, generator=g, dtype=torch.float64) * 2
    logps = old + 0.8 * (torch.rand(B, T, generator=g, dtype=torch.float64) - 0.5)
    ref = old + 0.2 * torch.randn(B, T, generator=g, dtype=torch.float64)
    adv = torch.randn(B, generator=g, dtype=torch.float64)
    mask = (torch.rand(B, T, generator=g) > 0.3).long()
    mask[0] = 0  # an empty row
    el, eh, beta = 0.2, 0.28, 0.1
    loss, _ = clipped_policy_loss(logps, old, adv, mask, eps_low=el, eps_high=eh, aggregation=aggregation,
                                  ref_logps=ref, kl_beta=beta)
    total, count, per_seq = 0.0, 0, []
    for b in range(B):
        s, n = 0.0, 0
        for t in range(T):
            if not mask[b, t]:
                continue
            r = math.exp(logps[b, t] - old[b, t])
            a = adv[b].item()
            x = ref[b, t].item() - logps[b, t].item()
            lt = -min(r * a, min(max(r, 1 - el), 1 + eh) * a) + beta * (math.exp(x) - x - 1)
            s, n = s + lt, n + 1
        total, count = total + s, count + n
        per_seq.append(s / max(n, 1))
    expected = total / count if aggregation == "token_mean" else sum(per_seq) / B
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_clipped_loss_bad_input():
    x = torch.zeros(2, 3)
    with pytest.raises(ValueError, match="ref_logps"):
        clipped_policy_loss(x, x, torch.zeros(2), torch.ones(2, 3), eps_low=0.2, eps_high=0.2, kl_beta=0.1)
    with pytest.raises(ValueError, match="aggregation"):
        clipped_policy_loss(x, x, torch.zeros(2), torch.ones(2, 3), eps_low=0.2, eps_high=0.2, aggregation="seq")
    with pytest.raises(ValueError, match="advantages"):
        clipped_policy_loss(x, x, torch.zeros(3), torch.ones(2, 3), eps_low=0.2, eps_high=0.2)


def test_sequence_mean_is_the_mean_over_all_rows():
    """The named reduction on the hand values above (-A per masked token, ratio 1): rows 0 and 1 give
    -1 and 2, mean 0.5; with a third row that has no masked token it counts as 0: (-1 + 2 + 0) / 3 = 1/3
    (the SFT loss's mean_over_nonempty_rows would skip it and keep 0.5)."""
    from trainer.algos.grpo import mean_over_all_rows
    from trainer.algos.sft import mean_over_nonempty_rows

    values = torch.tensor([[-1.0, 5.0, 5.0], [2.0, 2.0, 2.0], [7.0, 7.0, 7.0]])  # masked-out values are ignored
    mask = torch.tensor([[1.0, 0, 0], [1, 1, 1], [0, 0, 0]])
    assert_close(mean_over_all_rows(values[:2], mask[:2]), torch.tensor(0.5))
    assert_close(mean_over_all_rows(values, mask), torch.tensor(1.0 / 3.0))
    assert_close(mean_over_nonempty_rows(values * mask, mask.bool()), torch.tensor(0.5))
    logps = torch.zeros(3, 3)
    loss, _ = clipped_policy_loss(logps, logps, torch.tensor([1.0, -2.0, 4.0]), mask.long(), eps_low=0.2,
                                  eps_high=0.2, aggregation="sequence_mean")
    assert_close(loss, torch.tensor(1.0 / 3.0))
