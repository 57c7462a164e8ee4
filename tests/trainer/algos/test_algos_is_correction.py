"""Truncated IS weights between trainer and rollout log-probs, hand-worked.

trainer - rollout log-probs:
  row 0: (log 2, log 0.5, 5.0) with mask (1, 1, 0)  -> token ratios 2, 0.5 (third position masked: weight 1)
  row 1: (log 3, 0, 0)        with mask (1, 1, 1)  -> token ratios 3, 1, 1
cap 1.5:
  token level: weights (1.5, 0.5, 1 | 1.5, 1, 1); over the 5 masked tokens ratio mean (2+0.5+3+1+1)/5 = 1.5,
               weight mean (1.5+0.5+1.5+1+1)/5 = 1.1, capped 2/5 = 0.4,
               |dlogp| mean (log 2 + log 2 + log 3)/5 = 0.4969813, max log 3 = 1.0986123
  sequence level: row 0 exp(log 2 + log 0.5) = 1 -> 1; row 1 exp(log 3) = 3 -> 1.5; ratio mean 2, weight mean 1.25,
               capped 0.5
"""

import math

import pytest
import torch
from torch.testing import assert_close

from trainer.algos.is_correction import truncated_is_weights

TIGHT = {"rtol": 1e-6, "atol": 1e-7}
ROLLOUT = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -0.7, -0.9]])
TRAINER = ROLLOUT + torch.tensor([[math.log(2), math.log(0.5), 5.0], [math.log(3), 0.0, 0.0]])
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])


def test_token_level_hand_values():
    w, m = truncated_is_weights(TRAINER, ROLLOUT, MASK, level="token", cap=1.5)
    assert_close(w, torch.tensor([[1.5, 0.5, 1.0], [1.5, 1.0, 1.0]]), **TIGHT)
    assert_close(m["is_ratio_mean"], torch.tensor(1.5), **TIGHT)
    assert_close(m["is_weight_mean"], torch.tensor(1.1), **TIGHT)
    assert_close(m["is_frac_capped"], torch.tensor(0.4), **TIGHT)
    assert_close(m["logp_abs_diff_mean"], torch.tensor(0.4969813), **TIGHT)
    assert_close(m["logp_abs_diff_max"], torch.tensor(1.0986123), **TIGHT)


def test_sequence_level_hand_values():
    w, m = truncated_is_weights(TRAINER, ROLLOUT, MASK, level="sequence", cap=1.5)
    assert w.shape == (2, 1)
    assert_close(w, torch.tensor([[1.0], [1.5]]), **TIGHT)
    assert_close(m["is_ratio_mean"], torch.tensor(2.0), **TIGHT)
    assert_close(m["is_weight_mean"], torch.tensor(1.25), **TIGHT)
    assert_close(m["is_frac_capped"], torch.tensor(0.5), **TIGHT)


def test_weights_are_detached_and_nan_rollout_tokens_get_weight_one():
    trainer = TRAINER.clone().requires_grad_(True)
    rollout = ROLLOUT.clone()
    rollout[1, 0] = float("nan")
    w, m = truncated_is_weights(trainer, rollout, MASK, level="token", cap=1.5)
    assert not w.requires_grad
    assert w[1, 0].item() == 1.0
    assert torch.isfinite(torch.stack(list(m.values()))).all()


def test_matches_plain_loop():
    g = torch.Generator().manual_seed(0)
    tr = -torch.rand(4, 6, generator=g, dtype=torch.float64) * 3
    ro = tr + 0.5 * torch.randn(4, 6, generator=g, dtype=torch.float64)
    mask = (torch.rand(4, 6, generator=g) > 0.3).long()
    w, _ = truncated_is_weights(tr, ro, mask, level="token", cap=1.2)
    ws, _ = truncated_is_weights(tr, ro, mask, level="sequence", cap=1.2)
    for b in range(4):
        seq = 0.0
        for t in range(6):
            d = (tr[b, t] - ro[b, t]).item() if mask[b, t] else 0.0
            assert w[b, t].item() == pytest.approx(min(math.exp(d), 1.2), rel=1e-12)
            seq += d
        assert ws[b, 0].item() == pytest.approx(min(math.exp(seq), 1.2), rel=1e-12)


def test_bad_input():
    with pytest.raises(ValueError, match="level"):
        truncated_is_weights(TRAINER, ROLLOUT, MASK, level="tok", cap=2.0)
    with pytest.raises(ValueError, match="cap"):
        truncated_is_weights(TRAINER, ROLLOUT, MASK, cap=0.0)
