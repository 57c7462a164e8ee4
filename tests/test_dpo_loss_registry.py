"""The DPO-style loss registry (``algo.loss_type``): what docs/architecture.md's "A new DPO-style loss" walk
relies on. The toy loss here is IPO's squared loss (Azar et al. 2023), registered for the test only."""

import pytest
import torch
from omegaconf import OmegaConf

import dist_helpers as dh
from recipe_utils import compose, read_metrics, reset_accelerate, load_recipe


def test_registry_config_choice_and_default_agree():
    from trainer.algos import dpo
    from trainer.algos.choices import DPO_LOSS_TYPES
    from trainer.config.choices import DPOLossType
    from trainer.config.schemas import DPOAlgoConfig

    assert tuple(dpo.DPO_LOSSES) == DPO_LOSS_TYPES  # a name in one but not the other is a half-done walk
    assert tuple(m.value for m in DPOLossType) == DPO_LOSS_TYPES
    assert DPOAlgoConfig().loss_type == "sigmoid" and dpo.dpo_loss("sigmoid") is dpo.sigmoid_dpo_loss
    with pytest.raises(ValueError, match="unknown DPO loss 'nope'.*sigmoid"):
        dpo.dpo_loss("nope")


def test_loss_type_is_a_checked_choice():
    assert compose("dpo", []).algo.loss_type == "sigmoid"
    with pytest.raises(Exception, match="loss_type"):
        compose("dpo", ["algo.loss_type=nope"])


def ipo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, *, beta,
             label_smoothing=0.0, weights=None):
    """IPO: mean of (h - 1/(2 beta))^2, h = the difference of the chosen and rejected log-ratios."""
    from trainer.algos.dpo import dpo_row_metrics

    if label_smoothing:
        raise ValueError("ipo has no label smoothing")
    h = (policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps)
    losses = (h - 1.0 / (2.0 * beta)) ** 2
    loss = losses.mean() if weights is None else (weights * losses).sum() / weights.sum()
    rows = dpo_row_metrics(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps,
                           beta=beta)
    metrics = {"loss": loss.detach(), "logps/chosen": policy_chosen_logps.detach().mean(),
               "logps/rejected": policy_rejected_logps.detach().mean(),
               **{f"rewards/{k}": rows[r].mean() for k, r in
                  (("chosen", "chosen_rewards"), ("rejected", "rejected_rewards"), ("margins", "margins"),
                   ("accuracies", "accuracies"))}}
    return loss, metrics


def test_a_registered_loss_trains_through_the_recipe(tmp_path, monkeypatch):
    """Register ``ipo`` (as the walk's trainer/algos/dpo.py line would) and run recipes/dpo.py with it: every step
    calls it with the config's beta, step 1 (policy == reference, h = 0) logs IPO's (1/(2 beta))^2 = 1, not
    sigmoid's log 2, and its gradient moves the policy (step 2's margins are no longer 0)."""
    from trainer.algos import dpo

    calls = []

    def recorded(*args, **kwargs):
        calls.append(kwargs)
        return ipo_loss(*args, **kwargs)

    monkeypatch.setitem(dpo.DPO_LOSSES, "ipo", recorded)
    run_dir = tmp_path / "run"
    cfg = compose("dpo", [f"data.train_path={dh.write_pairs(tmp_path / 'pairs.jsonl', 12)}", "eval=none",
                          f"trainer.run_dir={run_dir}", "trainer.max_steps=2", "trainer.progress=false",
                          "algo.beta=0.5"])
    # the config's choice is built from trainer/algos/choices.py at import; the test-local name bypasses it
    cfg = OmegaConf.create(OmegaConf.to_container(cfg))
    cfg.algo.loss_type = "ipo"
    reset_accelerate()
    load_recipe("dpo").run(cfg)
    lines = [l for l in read_metrics(run_dir) if "loss" in l]
    assert [l["step"] for l in lines] == [1, 2]
    assert len(calls) >= 2 and all(c["beta"] == 0.5 and c["label_smoothing"] == 0.0 for c in calls)
    assert lines[0]["loss"] == pytest.approx(1.0, abs=1e-4)  # (1 / (2 * 0.5))^2; sigmoid would log 0.6931
    assert lines[0]["rewards/margins"] == 0.0 and lines[1]["rewards/margins"] != 0.0
    assert {k for k in lines[0] if k.startswith("rewards/accuracies/")}  # per-condition metrics still logged


def test_ipo_toy_loss_hand_value():
    """The toy loss itself: h = 2 and h = -1 at beta = 0.5 give ((2-1)^2 + (-1-1)^2) / 2 = 2.5."""
    loss, m = ipo_loss(torch.tensor([-4.0, -3.0]), torch.tensor([-6.0, -2.0]), torch.tensor([-5.0, -3.0]),
                       torch.tensor([-5.0, -3.0]), beta=0.5)
    assert loss.item() == pytest.approx(2.5) and m["rewards/margins"].item() == pytest.approx(0.25)
