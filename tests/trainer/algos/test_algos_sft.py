"""Masked NLL with hand-worked values.

Every position has logits (0, log 3): p = (0.25, 0.75), so -log p(1) = 0.2876821, -log p(0) = 1.3862944.
labels row 0: (1, 0, -100) -> NLL 0.2876821, 1.3862944;  row 1: (0, -100, -100) -> NLL 1.3862944.
    token_mean    = (0.2876821 + 1.3862944 + 1.3862944) / 3 = 1.0200903
    sequence_mean = ((0.2876821 + 1.3862944) / 2 + 1.3862944) / 2 = 1.1116413
"""

import math

import pytest
import torch
from torch.testing import assert_close

from trainer.algos.sft import masked_nll_loss

TIGHT = {"rtol": 1e-6, "atol": 1e-7}
LOGITS = torch.tensor([0.0, math.log(3.0)]).expand(2, 3, 2).clone()
LABELS = torch.tensor([[1, 0, -100], [0, -100, -100]])


def test_hand_values_token_and_sequence_mean():
    loss, m = masked_nll_loss(LOGITS, LABELS, None, aggregation="token_mean")
    assert_close(loss, torch.tensor(1.0200903), **TIGHT)
    assert m["num_tokens"].item() == 3
    loss, m = masked_nll_loss(LOGITS, LABELS, None, aggregation="sequence_mean")
    assert_close(loss, torch.tensor(1.1116413), **TIGHT)
    assert_close(m["nll_token_mean"], torch.tensor(1.0200903), **TIGHT)


def test_num_items_overrides_the_denominator_for_gradient_accumulation():
    """Sum of NLL = 3.0602709; over an accumulation window of 6 tokens: 0.5100451."""
    loss, _ = masked_nll_loss(LOGITS, LABELS, None, num_items=6)
    assert_close(loss, torch.tensor(0.5100451), **TIGHT)


def test_token_logps_input_and_explicit_mask_agree_with_logits_input():
    logps = torch.log_softmax(LOGITS, -1).gather(-1, LABELS.clamp_min(0).unsqueeze(-1)).squeeze(-1)
    mask = (LABELS != -100).long()
    a, _ = masked_nll_loss(LOGITS, LABELS, None)
    b, _ = masked_nll_loss(logps, None, mask)
    # An ignored position holding -inf must not poison the sum.
    c, _ = masked_nll_loss(logps.masked_fill(mask == 0, float("-inf")), LABELS, None)
    assert_close(a, b)
    assert_close(a, c)


def test_mask_and_labels_are_combined():
    """mask drops row 0 position 1 -> tokens 0.2876821 and 1.3862944 -> mean 0.8369882."""
    mask = torch.tensor([[1, 0, 1], [1, 1, 1]])
    loss, _ = masked_nll_loss(LOGITS, LABELS, mask)
    assert_close(loss, torch.tensor(0.8369882), **TIGHT)


@pytest.mark.parametrize("aggregation", ["token_mean", "sequence_mean"])
def test_matches_plain_loop_and_cross_entropy(aggregation):
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 7, 11, generator=g, dtype=torch.float64)
    labels = torch.randint(0, 11, (4, 7), generator=g)
    labels[torch.rand(4, 7, generator=g) < 0.4] = -100
    labels[2] = -100  # an empty row: excluded from sequence_mean
    loss, m = masked_nll_loss(logits, labels, None, aggregation=aggregation)
    rows = []
    for b in range(4):
        nll = [-torch.log_softmax(logits[b, t], -1)[labels[b, t]].item() for t in range(7) if labels[b, t] >= 0]
        if nll:
            rows.append(nll)
    if aggregation == "token_mean":
        expected = sum(map(sum, rows)) / sum(map(len, rows))
        ce = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), labels.reshape(-1), ignore_index=-100)
        assert loss.item() == pytest.approx(ce.item(), rel=1e-12)
    else:
        expected = sum(sum(r) / len(r) for r in rows) / len(rows)
    assert loss.item() == pytest.approx(expected, rel=1e-12)
    assert m["num_empty_sequences"].item() == 1


def test_bad_input():
    with pytest.raises(ValueError, match="aggregation"):
        masked_nll_loss(LOGITS, LABELS, None, aggregation="mean")
    with pytest.raises(ValueError, match="not aligned"):
        masked_nll_loss(LOGITS, LABELS[:, :2], None)
    with pytest.raises(ValueError, match="labels .* or an explicit mask"):
        masked_nll_loss(torch.zeros(2, 3), None, None)


def test_sequence_mean_is_the_mean_over_nonempty_rows():
    """The named reduction on the module docstring's values (-log p per counted position), with a third,
    empty row: skipped, so the value stays ((0.2876821 + 1.3862944) / 2 + 1.3862944) / 2 = 1.1116413.
    (GRPO's mean_over_all_rows would count it as 0: 2.2232826 / 3.)"""
    from trainer.algos.sft import mean_over_nonempty_rows

    values = torch.tensor([[0.2876821, 1.3862944, 0.0], [1.3862944, 0.0, 0.0], [0.0, 0.0, 0.0]])
    counted = torch.tensor([[True, True, False], [True, False, False], [False, False, False]])
    assert_close(mean_over_nonempty_rows(values, counted), torch.tensor(1.1116413), **TIGHT)
    labels = torch.cat([LABELS, torch.full((1, 3), -100)])
    loss, m = masked_nll_loss(torch.cat([LOGITS, LOGITS[:1]]), labels, None, aggregation="sequence_mean")
    assert_close(loss, torch.tensor(1.1116413), **TIGHT)
    assert m["num_empty_sequences"].item() == 1
    assert mean_over_nonempty_rows(torch.zeros(2, 3), torch.zeros(2, 3, dtype=torch.bool)).item() == 0.0
