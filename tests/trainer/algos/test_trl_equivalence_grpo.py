"""Our clipped policy loss against TRL 1.16 ``GRPOTrainer``'s, on identical log-probs and advantages.

TRL computes the GRPO loss inside ``GRPOTrainer._compute_loss(model, inputs)``, right after a model
forward (``self._get_per_token_logps_and_entropies``). We call that method unbound with a stand-in
``self`` that carries only the attributes the method reads and whose log-prob "forward" returns our
given ``(B, T)`` log-prob tensor (a leaf with ``requires_grad``), so TRL's own loss arithmetic runs
unmodified and its gradient w.r.t. the log-probs can be compared with ours. Nothing in TRL is patched.
"""

from __future__ import annotations

from collections import defaultdict
from types import SimpleNamespace

import pytest
import torch
from torch.testing import assert_close

from trainer.algos.grpo import clipped_policy_loss
from trl.trainer.grpo_trainer import GRPOTrainer


class _Accel:
    num_processes = 1

    def gather(self, x):
        return x

    def reduce(self, x, reduction="sum"):
        return x


def _trl_grpo_loss(logps, old_logps, advantages, mask, *, loss_type, eps_low, eps_high, beta=0.0, ref_logps=None,
                   is_ratio=None):
    B, T = logps.shape

    def per_token_logps_stub(model, input_ids, attention_mask, logits_to_keep, **kwargs):
        assert logits_to_keep == T
        return logps, torch.zeros(B, T), None  # (per_token_logps, entropies, aux_loss)

    fake_self = SimpleNamespace(
        _get_per_token_logps_and_entropies=per_token_logps_stub, aux_loss_enabled=False, top_entropy_quantile=1.0,
        off_policy_mask_threshold=None, importance_sampling_level="token", beta=beta, loss_type=loss_type,
        epsilon_low=eps_low, epsilon_high=eps_high, use_vllm=is_ratio is not None,
        vllm_importance_sampling_correction=is_ratio is not None, model=SimpleNamespace(training=True),
        current_gradient_accumulation_steps=1, accelerator=_Accel(), _entropy_bonus_enabled=False,
        args=SimpleNamespace(use_bias_correction_kl=False, delta=None, steps_per_generation=1),
        _metrics={"train": defaultdict(list), "eval": defaultdict(list)},
    )
    inputs = {
        "prompt_ids": torch.zeros(B, 2, dtype=torch.long), "prompt_mask": torch.ones(B, 2, dtype=torch.long),
        "completion_ids": torch.zeros(B, T, dtype=torch.long), "completion_mask": mask,
        "advantages": advantages, "old_per_token_logps": old_logps, "num_items_in_batch": mask.sum(),
    }
    if ref_logps is not None:
        inputs["ref_per_token_logps"] = ref_logps
    if is_ratio is not None:
        inputs["importance_sampling_ratio"] = is_ratio
    loss = GRPOTrainer._compute_loss(fake_self, None, inputs)
    return loss, {k: v[-1] for k, v in fake_self._metrics["train"].items()}


def _case(seed, B=6, T=7):
    g = torch.Generator().manual_seed(seed)
    old = -torch.rand(B, T, generator=g) * 3
    # Ratios between ~0.55 and ~1.8, advantages of alternating sign: both clip sides are hit.
    logps = (old + 1.2 * (torch.rand(B, T, generator=g) - 0.5)).requires_grad_(True)
    ref = old + 0.3 * torch.randn(B, T, generator=g)
    adv = (torch.rand(B, generator=g) + 0.1) * torch.tensor([1.0, -1.0] * (B // 2))
    lengths = torch.tensor([7, 5, 3, 1, 6, 2])[:B]
    mask = (torch.arange(T)[None, :] < lengths[:, None]).long()
    return logps, old, ref, adv, mask


@pytest.mark.parametrize("loss_type,aggregation", [("grpo", "sequence_mean"), ("dapo", "token_mean")])
@pytest.mark.parametrize("beta", [0.0, 0.04])
@pytest.mark.parametrize("eps", [(0.2, 0.2), (0.2, 0.28)])
def test_clipped_loss_and_grad_match_trl(loss_type, aggregation, beta, eps):
    eps_low, eps_high = eps
    logps, old, ref, adv, mask = _case(seed=int(beta * 100) + int(eps_high * 100))
    theirs, tm = _trl_grpo_loss(logps, old, adv, mask, loss_type=loss_type, eps_low=eps_low, eps_high=eps_high,
                                beta=beta, ref_logps=ref if beta else None)
    (g_theirs,) = torch.autograd.grad(theirs, logps)
    ours, m = clipped_policy_loss(logps, old, adv, mask, eps_low=eps_low, eps_high=eps_high,
                                  aggregation=aggregation, ref_logps=ref if beta else None, kl_beta=beta)
    (g_ours,) = torch.autograd.grad(ours, logps)
    assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
    assert_close(g_ours, g_theirs, rtol=1e-6, atol=1e-7)
    assert m["clip_frac_low"].item() == pytest.approx(tm["clip_ratio/low_mean"], abs=1e-7)
    assert m["clip_frac_high"].item() == pytest.approx(tm["clip_ratio/high_mean"], abs=1e-7)
    assert m["clip_frac"].item() == pytest.approx(tm["clip_ratio/region_mean"], abs=1e-7)
    assert m["clip_frac_low"] > 0 and m["clip_frac_high"] > 0  # the case exercises both clip sides
    if beta:
        assert m["kl"].item() == pytest.approx(tm["kl"], rel=1e-6)


def test_is_weights_match_trl_vllm_importance_sampling_correction():
    logps, old, _, adv, mask = _case(seed=3)
    w = torch.rand(logps.shape, generator=torch.Generator().manual_seed(9)) * 2
    theirs, _ = _trl_grpo_loss(logps, old, adv, mask, loss_type="dapo", eps_low=0.2, eps_high=0.28, is_ratio=w)
    ours, _ = clipped_policy_loss(logps, old, adv, mask, eps_low=0.2, eps_high=0.28, is_weights=w)
    assert_close(ours, theirs, rtol=1e-6, atol=1e-7)
