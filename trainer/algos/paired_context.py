"""Knowledgeable-R1's advantages for paired rollouts with and without the retrieved context.

Knowledgeable-R1 (Lin et al., arXiv 2506.05154, v4 "Resisting Contextual Interference in RAG via
Parametric-Knowledge Reinforcement"; code: github.com/lcy80366872/Knowledgeable-R1) samples each prompt twice
over: G completions of the prompt with its context ``p'`` (contextual knowledge, CK) and G of the same
question without it ``p`` (parametric knowledge, PK). It trains three kinds of rows:

- **CK rows**, a CK completion after ``p'``: ``A_CK = A_global + A_local``;
- **RPK rows**, a PK completion after ``p'`` (the policy *with* the context is taught the answers it gives
  without it, when those are better): ``A_RPK = LeakyReLU_beta(A_global)``;
- **PK rows**, a PK completion after ``p`` (its own prompt): ``A_PK = A_global``.

``A_local`` is the group-relative advantage within each regime's G completions, ``A_global`` the one over a
prompt's 2G completions together (``trainer.algos.grpo.group_advantages`` for both, so ``std_scaling`` and
``eps`` mean what they mean for GRPO). The asymmetric transformation keeps the RPK rows' positive advantages and
multiplies the negative ones by ``beta`` (the paper's adaptive knowledge-balance modulation): over the batch,
with ``E_CK`` the mean CK advantage and ``E_+``, ``E_-`` the means of ``max(A, 0)`` and ``min(A, 0)`` over the PK
completions' global advantages,

    beta = 1                                         if E_CK < 0 (the context hurts on average), or E_- = 0
    beta = max((E_CK - E_+) / E_-, min_slope)        otherwise,

so that the transformed RPK advantages have the CK rows' mean ``E_+ + beta E_- = E_CK`` (clipped below at
``min_slope``, 0.01 in the reference code): where the context helps, an answer found without it is punished
less for being wrong under it, which keeps exploring the parametric answer.

Public API: ``paired_context_advantages(rewards_with, rewards_without, *, std_scaling="group", eps=1e-4,
min_slope=0.01) -> (adv_with, adv_without, adv_cross, metrics)``.

How this departs from its reference (the v4 code's ``compute_grpo_outcome_advantage_aug`` and the beta of
``ray_trainer.compute_advantage``):

- ``E_CK``, ``E_+`` and ``E_-`` are means over completions, not over completion tokens;
- ``eps`` is GRPO's here (1e-4, as TRL), where the reference adds 1e-6 to the std;
- ``beta = 1`` also when no PK completion has a negative global advantage (``E_- = 0``), where the reference
  divides by zero (the slope then multiplies nothing but zeros);
- ``std_scaling`` other than ``group`` (``batch``, ``none``) is this project's extension.
The trainer-side departures (the rows, the loss) are listed in ``trainer/rl/paired_rollouts.py``.
"""

from __future__ import annotations

import torch

from trainer.algos.choices import STD_SCALINGS
from trainer.algos.grpo import group_advantages

__all__ = ["paired_context_advantages"]


def paired_context_advantages(
    rewards_with: torch.Tensor,
    rewards_without: torch.Tensor,
    *,
    std_scaling: str = "group",
    eps: float = 1e-4,
    min_slope: float = 0.01,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Knowledgeable-R1's advantages of a batch of paired groups (module docstring).

    Shapes: ``rewards_with``, ``rewards_without``: ``(P, G)``, row ``i`` the rewards of prompt ``i``'s G completions
    with its context and its G completions without. Returns ``adv_with (P, G)`` (CK rows: ``A_global + A_local``),
    ``adv_without (P, G)`` (PK rows under their own prompt: ``A_global``), ``adv_cross (P, G)`` (the same PK
    completions under the prompt with the context: ``LeakyReLU_beta(A_global)``) and 0-dim tensor metrics:
    ``beta``, ``e_ck``, ``e_pos``, ``e_neg``, ``reward_with``, ``reward_without`` (each regime's mean reward),
    ``context_helps_frac`` and ``context_hurts_frac`` (the share of prompts whose mean reward is higher, lower,
    with the context than without).
    """
    if std_scaling not in STD_SCALINGS:
        raise ValueError(f"std_scaling must be one of {STD_SCALINGS}; got {std_scaling!r}")
    if not 0.0 < min_slope <= 1.0:
        raise ValueError(f"min_slope must be in (0, 1], got {min_slope}")
    if rewards_with.dim() != 2 or rewards_with.shape != rewards_without.shape or rewards_with.numel() == 0:
        raise ValueError(f"rewards_with {tuple(rewards_with.shape)} and rewards_without "
                         f"{tuple(rewards_without.shape)} must both be (P, G) with P, G >= 1")
    dtype = rewards_with.dtype if rewards_with.is_floating_point() else torch.float32
    rw, rwo = rewards_with.to(dtype), rewards_without.to(dtype)
    P, G = rw.shape
    joint = torch.cat([rw, rwo], dim=1)  # (P, 2G): a prompt's two groups side by side
    a_global = group_advantages(joint.reshape(-1), 2 * G, std_scaling=std_scaling, eps=eps)[0].view(P, 2 * G)
    a_local = group_advantages(joint.reshape(-1), G, std_scaling=std_scaling, eps=eps)[0].view(P, 2, G)
    adv_with = a_global[:, :G] + a_local[:, 0]
    adv_without = a_global[:, G:]
    e_ck = adv_with.mean()
    e_pos, e_neg = adv_without.clamp(min=0).mean(), adv_without.clamp(max=0).mean()
    if bool(e_ck < 0) or bool(e_neg == 0):
        beta = torch.ones((), dtype=dtype)
    else:
        beta = torch.clamp((e_ck - e_pos) / e_neg, min=min_slope)
    adv_cross = torch.where(adv_without >= 0, adv_without, beta * adv_without)
    mean_with, mean_without = rw.mean(dim=1), rwo.mean(dim=1)
    metrics = {"beta": beta.detach(), "e_ck": e_ck.detach(), "e_pos": e_pos.detach(), "e_neg": e_neg.detach(),
               "reward_with": rw.mean(), "reward_without": rwo.mean(),
               "context_helps_frac": (mean_with > mean_without).to(dtype).mean(),
               "context_hurts_frac": (mean_with < mean_without).to(dtype).mean()}
    return adv_with, adv_without, adv_cross, metrics
