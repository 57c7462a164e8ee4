"""Sigmoid DPO with hand-worked values (torchtune style), a plain-loop check and per-condition metrics.

Two pairs used throughout, beta = 0.5 (log-probs are summed completion log-probs):

    pair 1: pi_c=-4, pi_r=-6, ref_c=-5, ref_r=-5 -> logratios (+1, -1), Delta = 2, beta*Delta = 1
            loss = -log sigma(1) = log(1 + e^-1) = 0.3132617
            rewards: chosen 0.5, rejected -0.5, margin 1.0, correct
    pair 2: pi_c=-3, pi_r=-2, ref_c=-3, ref_r=-3 -> logratios (0, +1), Delta = -1, beta*Delta = -0.5
            loss = log(1 + e^0.5) = 0.9740770
            rewards: chosen 0.0, rejected 0.5, margin -0.5, wrong
    mean = (0.3132617 + 0.9740770) / 2 = 0.6436693

Label smoothing: since log(1+e^x) - log(1+e^-x) = x, the cDPO loss is l(beta*Delta) + eps*beta*Delta:
    eps = 0.1: pair 1: 0.3132617 + 0.1*1 = 0.4132617; pair 2: 0.9740770 - 0.05 = 0.9240770.
"""

import math

import pytest
import torch
from torch.testing import assert_close

from trainer.algos.dpo import chosen_nll_loss, dpo_row_metrics, per_group_metrics, sigmoid_dpo_loss

# Hand values are written to 7 significant digits; check at that precision, not the default atol 1e-5.
TIGHT = {"rtol": 1e-6, "atol": 1e-7}

PC = torch.tensor([-4.0, -3.0])
PR = torch.tensor([-6.0, -2.0])
RC = torch.tensor([-5.0, -3.0])
RR = torch.tensor([-5.0, -3.0])


def test_hand_values_loss_and_metrics():
    loss, m = sigmoid_dpo_loss(PC, PR, RC, RR, beta=0.5)
    assert_close(loss, torch.tensor(0.6436693), **TIGHT)
    assert_close(m["rewards/chosen"], torch.tensor(0.25))  # (0.5 + 0.0) / 2
    assert_close(m["rewards/rejected"], torch.tensor(0.0))  # (-0.5 + 0.5) / 2
    assert_close(m["rewards/margins"], torch.tensor(0.25))  # (1.0 - 0.5) / 2
    assert_close(m["rewards/accuracies"], torch.tensor(0.5))


def test_hand_values_label_smoothing():
    loss, _ = sigmoid_dpo_loss(PC, PR, RC, RR, beta=0.5, label_smoothing=0.1)
    assert_close(loss, torch.tensor((0.4132617 + 0.9240770) / 2), **TIGHT)


def test_hand_values_weights_are_normalised_by_their_sum():
    # w = (3, 1): (3 * 0.3132617 + 1 * 0.9740770) / 4 = 0.4784655
    loss, _ = sigmoid_dpo_loss(PC, PR, RC, RR, beta=0.5, weights=torch.tensor([3.0, 1.0]))
    assert_close(loss, torch.tensor(0.4784655), **TIGHT)
    # scaling all weights does not change the loss
    loss2, _ = sigmoid_dpo_loss(PC, PR, RC, RR, beta=0.5, weights=torch.tensor([0.3, 0.1]))
    assert_close(loss, loss2)


def test_hand_gradient():
    """d loss / d pi_c_i = -beta * sigma(-beta*Delta_i) / B; pair 1: -0.5 * sigma(-1) / 2 = -0.0672354,
    pair 2: -0.5 * sigma(0.5) / 2 = -0.1556148; d/d pi_r is the negative."""
    pc = PC.clone().requires_grad_(True)
    pr = PR.clone().requires_grad_(True)
    loss, _ = sigmoid_dpo_loss(pc, pr, RC, RR, beta=0.5)
    loss.backward()
    assert_close(pc.grad, torch.tensor([-0.0672354, -0.1556148]), **TIGHT)
    assert_close(pr.grad, -pc.grad)


def _loop_reference(pc, pr, rc, rr, beta, eps, w):
    num = den = 0.0
    for i in range(len(pc)):
        d = beta * ((pc[i] - rc[i]) - (pr[i] - rr[i]))
        li = -(1 - eps) * math.log(1 / (1 + math.exp(-d))) - eps * math.log(1 / (1 + math.exp(d)))
        num += w[i] * li
        den += w[i]
    return num / den


@pytest.mark.parametrize("eps", [0.0, 0.25])
def test_vectorised_matches_plain_loop(eps):
    g = torch.Generator().manual_seed(0)
    pc, pr, rc, rr = (torch.randn(16, generator=g, dtype=torch.float64) * 3 - 10 for _ in range(4))
    w = torch.rand(16, generator=g, dtype=torch.float64)
    loss, _ = sigmoid_dpo_loss(pc, pr, rc, rr, beta=0.3, label_smoothing=eps, weights=w)
    expected = _loop_reference(pc.tolist(), pr.tolist(), rc.tolist(), rr.tolist(), 0.3, eps, w.tolist())
    assert loss.item() == pytest.approx(expected, rel=1e-12)


def test_scope_condition_weighting_recipe_from_docstring():
    """w_i = lambda_b / n_b reproduces sum_b lambda_b * mean_{i in b} l_i inside one batch."""
    g = torch.Generator().manual_seed(1)
    pc, pr, rc, rr = (torch.randn(6, generator=g) for _ in range(4))
    cond = ["mis", "mis", "mis", "clean", "cor", "irr"]
    lam = {"mis": 0.25, "clean": 0.25, "cor": 0.25, "irr": 0.25}
    n = {c: cond.count(c) for c in lam}
    w = torch.tensor([lam[c] / n[c] for c in cond])
    loss, _ = sigmoid_dpo_loss(pc, pr, rc, rr, beta=0.1, weights=w)
    expected = sum(lam[c] * sigmoid_dpo_loss(pc[idx], pr[idx], rc[idx], rr[idx], beta=0.1)[0]
                   for c in lam for idx in [torch.tensor([i for i, x in enumerate(cond) if x == c])])
    assert_close(loss, expected)


def test_per_group_metrics_hand_values():
    rows = dpo_row_metrics(PC, PR, RC, RR, beta=0.5)
    assert_close(rows["margins"], torch.tensor([1.0, -0.5]))
    out = per_group_metrics(rows, ["misleading", "clean"])
    assert out["rewards/accuracies/misleading"] == 1.0 and out["rewards/accuracies/clean"] == 0.0
    assert out["rewards/margins/misleading"] == pytest.approx(1.0)
    assert out["rewards/margins/clean"] == pytest.approx(-0.5)
    both = per_group_metrics(rows, ["misleading", "misleading"])
    assert both["rewards/margins/misleading"] == pytest.approx(0.25)
    assert "rewards/margins/clean" not in both  # absent groups are absent, not zero


def test_tie_counts_as_wrong_and_loss_is_log2_at_start():
    x = torch.tensor([-3.0, -7.0])
    loss, m = sigmoid_dpo_loss(x, x, x, x, beta=0.1)
    assert_close(loss, torch.tensor(math.log(2.0)))
    assert m["rewards/accuracies"].item() == 0.0


def test_bad_inputs_are_rejected_with_clear_messages():
    with pytest.raises(ValueError, match="label_smoothing"):
        sigmoid_dpo_loss(PC, PR, RC, RR, beta=0.1, label_smoothing=0.5)
    with pytest.raises(ValueError, match="same length"):
        sigmoid_dpo_loss(PC, PR[:1], RC, RR, beta=0.1)
    with pytest.raises(ValueError, match=">= 0"):
        sigmoid_dpo_loss(PC, PR, RC, RR, beta=0.1, weights=torch.tensor([1.0, -1.0]))
    with pytest.raises(ValueError, match="one per pair"):
        sigmoid_dpo_loss(PC, PR, RC, RR, beta=0.1, weights=torch.tensor([1.0]))
    with pytest.raises(ValueError, match="group names"):
        per_group_metrics(dpo_row_metrics(PC, PR, RC, RR, beta=0.1), ["a"])


def test_all_zero_weights_give_zero_loss_still_in_graph():
    pc = PC.clone().requires_grad_(True)
    loss, _ = sigmoid_dpo_loss(pc, PR, RC, RR, beta=0.1, weights=torch.zeros(2))
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(pc.grad, torch.zeros(2))


# -- RPO's NLL term (algo.rpo_alpha) --------------------------------------------------------------
def test_chosen_nll_hand_values_are_the_token_mean_over_the_batch():
    # rows of 2 and 3 tokens with summed log-probs -2 and -4: (2 + 4) / (2 + 3) = 1.2, not the mean of the
    # per-row means (1.0 and 1.333...)
    loss, metrics = chosen_nll_loss(torch.tensor([-2.0, -4.0]), torch.tensor([2, 3]))
    assert_close(loss, torch.tensor(1.2))
    assert_close(metrics["nll/chosen"], torch.tensor(1.2))


def test_chosen_nll_equals_trl_sft_term_on_per_token_logps():
    """TRL 1.16's ``loss_type="sft"`` term is ``-per_token_logps[chosen_mask].mean()``; summing per row first and
    dividing by the counts gives the same number."""
    g = torch.Generator().manual_seed(0)
    per_token = -torch.rand(4, 7, generator=g)
    mask = torch.tensor([[0, 1, 1, 1, 0, 0, 0], [0, 0, 1, 1, 1, 1, 1], [0, 1, 0, 0, 0, 0, 0], [0, 1, 1, 0, 0, 0, 0]])
    trl_term = -per_token[mask.bool()].mean()
    loss, _ = chosen_nll_loss((per_token * mask).sum(1), mask.sum(1))
    assert_close(loss, trl_term)


def test_chosen_nll_gradient_and_empty_batch():
    logps = torch.tensor([-2.0, -4.0], requires_grad=True)
    chosen_nll_loss(logps, torch.tensor([2, 3]))[0].backward()
    assert_close(logps.grad, torch.tensor([-0.2, -0.2]))  # d/dlogp_i of -sum/5
    empty = torch.tensor([0.0], requires_grad=True)
    loss, _ = chosen_nll_loss(empty, torch.tensor([0]))
    assert loss.item() == 0.0 and loss.requires_grad
    with pytest.raises(ValueError):
        chosen_nll_loss(torch.zeros(2), torch.ones(3))


# ---------------------------------------------------------------------------------------------------------------------
# SimPO: reference-free, on per-token mean log-probs, target margin gamma
# ---------------------------------------------------------------------------------------------------------------------
#
# Two pairs, beta = 2, gamma = 0.5 (log-probs are per-token means):
#     pair 1: pi_c=-1.0, pi_r=-1.5 -> z = 2*0.5 - 0.5 = 0.5    loss = log(1 + e^-0.5) = 0.4740770, correct
#     pair 2: pi_c=-2.0, pi_r=-1.0 -> z = 2*(-1) - 0.5 = -2.5  loss = log(1 + e^2.5) = 2.5788897, wrong
#     mean = 1.5264834; rewards are beta*pi: chosen (-2 - 4)/2 = -3, rejected (-3 - 2)/2 = -2.5, margin -0.5
#     label smoothing eps = 0.2: l(z) + eps*z = 0.5740770 and 2.0788897, mean 1.3264834
#     weights (3, 1): (3*0.4740770 + 2.5788897) / 4 = 1.0002802

SC = torch.tensor([-1.0, -2.0])
SR = torch.tensor([-1.5, -1.0])


def test_simpo_hand_values_loss_metrics_smoothing_and_weights():
    from trainer.algos.dpo import simpo_loss

    loss, m = simpo_loss(SC, SR, beta=2.0, gamma=0.5)
    assert_close(loss, torch.tensor(1.5264834), **TIGHT)
    assert_close(m["rewards/chosen"], torch.tensor(-3.0))
    assert_close(m["rewards/rejected"], torch.tensor(-2.5))
    assert_close(m["rewards/margins"], torch.tensor(-0.5))  # beta*(pi_c - pi_r): the margin gamma is not in it
    assert_close(m["rewards/accuracies"], torch.tensor(0.5))
    assert_close(m["logps/chosen"], torch.tensor(-1.5))
    assert_close(m["loss"], loss.detach())
    smoothed, _ = simpo_loss(SC, SR, beta=2.0, gamma=0.5, label_smoothing=0.2)
    assert_close(smoothed, torch.tensor(1.3264834), **TIGHT)
    weighted, _ = simpo_loss(SC, SR, beta=2.0, gamma=0.5, weights=torch.tensor([3.0, 1.0]))
    assert_close(weighted, torch.tensor(1.0002802), **TIGHT)
    no_margin, _ = simpo_loss(SC, SR, beta=2.0, gamma=0.0)  # gamma = 0: plain sigmoid of beta*(pi_c - pi_r)
    assert_close(no_margin, torch.tensor((math.log1p(math.exp(-1.0)) + math.log1p(math.exp(2.0))) / 2), **TIGHT)


def test_simpo_hand_gradient():
    """d loss / d pi_c_i = -beta * sigma(-z_i) / B: pair 1: -2 * sigma(-0.5) / 2 = -0.3775407, pair 2:
    -2 * sigma(2.5) / 2 = -0.9241418; d/d pi_r is the negative."""
    from trainer.algos.dpo import simpo_loss

    pc, pr = SC.clone().requires_grad_(True), SR.clone().requires_grad_(True)
    simpo_loss(pc, pr, beta=2.0, gamma=0.5)[0].backward()
    assert_close(pc.grad, torch.tensor([-0.3775407, -0.9241418]), **TIGHT)
    assert_close(pr.grad, -pc.grad)


def test_reference_free_row_metrics_and_the_registered_declarations():
    from trainer.algos.dpo import DPOLoss, simpo_loss
    from trainer.dpo.losses import dpo_loss

    rows = dpo_row_metrics(SC, SR, None, None, beta=2.0)  # reference-free: rewards are beta * pi
    assert_close(rows["margins"], torch.tensor([1.0, -2.0]))
    assert_close(rows["accuracies"], torch.tensor([1.0, 0.0]))
    with pytest.raises(ValueError, match="both"):
        dpo_row_metrics(SC, SR, SC, None, beta=2.0)
    sigmoid, simpo = dpo_loss("sigmoid"), dpo_loss("simpo")
    assert (sigmoid.reference, sigmoid.logps, dict(sigmoid.hyperparameters)) == (True, "sum", {})
    assert (simpo.reference, simpo.logps, dict(simpo.hyperparameters)) == (False, "mean", {"gamma": "simpo_gamma"})
    summed, counts = torch.tensor([-6.0, -3.0, -2.0]), torch.tensor([3, 2, 0])
    assert_close(sigmoid.sequence_logps(summed, counts), summed)
    assert_close(simpo.sequence_logps(summed, counts), torch.tensor([-2.0, -1.5, -2.0]))  # no tokens: counts 1
    with pytest.raises(ValueError, match="reference-free"):
        simpo(SC, SR, SC, SR, beta=2.0, gamma=0.5)
    with pytest.raises(ValueError, match="needs reference"):
        sigmoid(PC, PR, beta=0.5)
    assert_close(simpo(SC, SR, beta=2.0, gamma=0.5)[0], simpo_loss(SC, SR, beta=2.0, gamma=0.5)[0])
    with pytest.raises(ValueError, match="logps"):
        DPOLoss(simpo_loss, logps="max")
