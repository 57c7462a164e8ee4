"""The hand-written LR schedule (trainer.runtime.optim.lr_lambda): hand-worked values, and exactly how it departs from
transformers' schedules (warm-up one step ahead; the same decay)."""

import math

import pytest
import torch
from transformers import get_scheduler

from trainer.runtime.optim import lr_lambda


def test_hand_worked_values():
    f = lr_lambda("cosine", max_steps=12, warmup_steps=4)
    assert [f(s) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]  # (s + 1) / warmup
    assert f(4) == 1.0 and f(8) == pytest.approx(0.5) and f(12) == pytest.approx(0.0)  # progress 0, 1/2, 1
    assert f(6) == pytest.approx(0.5 * (1 + math.cos(math.pi / 4)))
    lin = lr_lambda("linear", max_steps=12, warmup_steps=4)
    assert lin(8) == pytest.approx(0.5) and lin(12) == 0.0
    assert lr_lambda("constant", max_steps=12, warmup_steps=4)(11) == 1.0
    assert lr_lambda("cosine", max_steps=10, warmup_steps=0)(0) == 1.0  # no warm-up: full LR at once


@pytest.mark.parametrize("kind", ["cosine", "linear", "constant"])
def test_departure_from_transformers(kind):
    """Same multiplier as transformers after warm-up; during warm-up ours at step s is theirs at s + 1."""
    max_steps, warmup = 20, 5
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    name = {"constant": "constant_with_warmup"}.get(kind, kind)
    theirs = get_scheduler(name, opt, num_warmup_steps=warmup, num_training_steps=max_steps).lr_lambdas[0]
    ours = lr_lambda(kind, max_steps=max_steps, warmup_steps=warmup)
    for s in range(warmup):
        assert ours(s) == pytest.approx(theirs(s + 1))
    assert theirs(0) == 0.0 and ours(0) > 0.0
    for s in range(warmup, max_steps + 1):
        assert ours(s) == pytest.approx(theirs(s), abs=1e-12)
