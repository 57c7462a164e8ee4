"""Group-relative advantages, the clipped policy-gradient surrogate and the k3 KL estimator.

Public API (names are stable):

- ``group_advantages(rewards, group_size, *, std_scaling="group", eps=1e-4) -> (advantages, zero_variance_mask)``
- ``k3_kl(logps, ref_logps) -> per-token KL (B, T)``
- ``clipped_policy_loss(logps, old_logps, advantages, mask, *, eps_low, eps_high, aggregation="token_mean",
  ref_logps=None, kl_beta=0.0, is_weights=None, num_tokens=None) -> (loss, metrics)``
- ``sft_coef_at(step, *, coef, schedule="constant", max_steps=None) -> float``: the SFT term's weight at a step
- ``sft_term(logps, mask, *, coef, num_tokens=None) -> (loss, metrics)``: CHORD's SFT term (arXiv 2508.11408),
  ``coef`` x the masked token NLL of target completions, added to the GRPO loss
- ``mean_over_all_rows(values, mask) -> ()``: the reduction behind ``aggregation="sequence_mean"`` here
  (a row without a masked token counts as 0, as in TRL; the SFT loss's ``sequence_mean`` skips such a
  row: ``trainer.algos.sft.mean_over_nonempty_rows``)

Token tensors are ``(B, T)`` over completion positions with a 0/1 ``mask``; ``B = num_groups * group_size``
with the samples of a group contiguous (``rewards.view(num_groups, group_size)``).
"""

from __future__ import annotations

import torch

from trainer.algos.choices import AGGREGATIONS, SFT_SCHEDULES, STD_SCALINGS  # sequence_mean here: mean_over_all_rows
from trainer.algos.sft import masked_nll_loss

__all__ = ["group_advantages", "k3_kl", "clipped_policy_loss", "mean_over_all_rows", "sft_coef_at", "sft_term"]


def mean_over_all_rows(values: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Each row's mean of ``values * mask`` over its masked positions, then the mean over all B rows: a
    row without a masked position counts as 0 (TRL 1.16 ``loss_type="grpo"``). ``values``, ``mask``:
    ``(B, T)``, ``mask`` 0/1 in ``values``' dtype."""
    return ((values * mask).sum(dim=1) / mask.sum(dim=1).clamp_min(1.0)).mean()


def group_advantages(
    rewards: torch.Tensor,
    group_size: int,
    *,
    std_scaling: str = "group",
    eps: float = 1e-4,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GRPO advantages ``A_i = (R_i - mean_group R) / (std + eps)`` (Shao et al. 2024, DeepSeekMath §4.1.2).

    Shapes: ``rewards (B,)`` with ``B = num_groups * group_size``, groups contiguous.
    Returns ``advantages (B,)`` and ``zero_variance_mask (num_groups,)`` (bool: all rewards in the group
    are exactly equal; such groups carry no learning signal and Box2 drops them, docs/box2.md#outcome-rl).

    ``std_scaling``: ``"group"`` divides by the group's std, ``"batch"`` by the std of the whole batch,
    ``"none"`` only centres (Dr. GRPO, Liu et al. 2025). The std is the unbiased (Bessel) one and
    ``eps`` is added to it, as in TRL 1.16 (``scale_rewards``); verl uses the same eps=1e-6 form.
    Differs from TRL: the zero-variance flag is exact equality per group, not ``isclose(std, 0)``.
    """
    if std_scaling not in STD_SCALINGS:
        raise ValueError(f"std_scaling must be one of {STD_SCALINGS}; got {std_scaling!r}")
    if rewards.dim() != 1:
        raise ValueError(f"rewards must be 1-D (B,); got shape {tuple(rewards.shape)}")
    if group_size < 1 or rewards.numel() == 0 or rewards.numel() % group_size != 0:
        raise ValueError(f"rewards has {rewards.numel()} entries, which is not a positive multiple of "
                         f"group_size={group_size}")
    if not bool(torch.isfinite(rewards).all()):
        raise ValueError("rewards contain NaN/inf; score failed samples explicitly before computing advantages")

    grouped = rewards.view(-1, group_size).to(torch.float32 if not rewards.is_floating_point() else rewards.dtype)
    centred = grouped - grouped.mean(dim=1, keepdim=True)
    zero_variance = (grouped == grouped[:, :1]).all(dim=1)
    if std_scaling == "group":
        std = grouped.std(dim=1, keepdim=True) if group_size > 1 else torch.zeros_like(grouped[:, :1])
        advantages = centred / (std + eps)
    elif std_scaling == "batch":
        std = grouped.std() if grouped.numel() > 1 else torch.zeros((), dtype=grouped.dtype, device=grouped.device)
        advantages = centred / (std + eps)
    else:
        advantages = centred
    return advantages.reshape(-1), zero_variance


def k3_kl(logps: torch.Tensor, ref_logps: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimator of KL(pi || pi_ref) (Schulman 2020, "Approximating KL divergence").

    With ``x = ref_logps - logps`` (log pi_ref/pi at the sampled token): ``k3 = exp(x) - x - 1 >= 0``,
    unbiased for KL(pi || pi_ref) when tokens are sampled from pi. Shapes: both ``(B, T)`` (any equal
    shape); returns the same shape, unmasked (mask it yourself). Same formula as TRL and verl
    ``low_var_kl`` (verl additionally clamps to [-10, 10]; we do not).
    """
    if logps.shape != ref_logps.shape:
        raise ValueError(f"logps {tuple(logps.shape)} and ref_logps {tuple(ref_logps.shape)} differ in shape")
    x = ref_logps - logps
    return torch.exp(x) - x - 1.0


def _masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return (x * mask).sum() / mask.sum().clamp_min(1.0)


def _checked_advantages(logps: torch.Tensor, old_logps: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, *,
                        aggregation: str, eps_low: float, eps_high: float, kl_beta: float,
                        ref_logps: torch.Tensor | None) -> torch.Tensor:
    """:func:`clipped_policy_loss`'s argument checks (ValueError on the first that fails); returns ``advantages``
    as ``(B, 1)`` (from ``(B,)``) or ``(B, T)`` (as given)."""
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}; got {aggregation!r}")
    if logps.shape != old_logps.shape or logps.shape != mask.shape or logps.dim() != 2:
        raise ValueError(f"logps {tuple(logps.shape)}, old_logps {tuple(old_logps.shape)} and mask "
                         f"{tuple(mask.shape)} must all be (B, T)")
    if eps_low < 0 or eps_high < 0:
        raise ValueError(f"eps_low and eps_high must be >= 0; got {eps_low}, {eps_high}")
    if kl_beta != 0.0 and ref_logps is None:
        raise ValueError("kl_beta != 0 needs ref_logps (B, T)")
    if advantages.dim() == 1:
        if advantages.shape[0] != logps.shape[0]:
            raise ValueError(f"advantages (B,)={tuple(advantages.shape)} does not match B={logps.shape[0]}")
        return advantages.unsqueeze(1)
    if advantages.shape != logps.shape:
        raise ValueError(f"advantages must be (B,) or (B, T); got {tuple(advantages.shape)}")
    return advantages


def _aggregate(x: torch.Tensor, mask: torch.Tensor, aggregation: str,
               num_tokens: int | float | torch.Tensor | None) -> torch.Tensor:
    """``x``, ``mask``: ``(B, T)`` (``mask`` 0/1 in ``x``'s dtype) -> ``()``: ``"token_mean"`` is ``sum(x * mask) / N``
    (``N = num_tokens`` if given, else ``mask.sum()``), ``"sequence_mean"`` is :func:`mean_over_all_rows`."""
    if aggregation == "token_mean":
        denom = mask.sum() if num_tokens is None else torch.as_tensor(num_tokens, device=x.device)
        return (x * mask).sum() / denom.to(x.dtype).clamp_min(1.0)
    return mean_over_all_rows(x, mask)


@torch.no_grad()
def _clip_metrics(ratio: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor, per_token: torch.Tensor, *,
                  eps_low: float, eps_high: float, aggregation: str, num_tokens: int | float | torch.Tensor | None,
                  dtype: torch.dtype) -> dict[str, torch.Tensor]:
    """:func:`clipped_policy_loss`'s metrics without ``kl`` (detached). ``ratio``, ``mask`` (0/1, float),
    ``per_token``: ``(B, T)``; ``advantages``: ``(B, 1)`` or ``(B, T)``; ``dtype``: the log-probs' dtype."""
    low = ((ratio < 1.0 - eps_low) & (advantages < 0)).to(dtype)
    high = ((ratio > 1.0 + eps_high) & (advantages > 0)).to(dtype)
    r = ratio.detach()[mask.bool()]
    return {
        "policy_loss": _aggregate(per_token.detach(), mask, aggregation, num_tokens),
        "clip_frac_low": _masked_mean(low, mask),
        "clip_frac_high": _masked_mean(high, mask),
        "clip_frac": _masked_mean(torch.maximum(low, high), mask),
        "ratio_mean": r.mean() if r.numel() else torch.ones((), dtype=dtype),
        "ratio_min": r.min() if r.numel() else torch.ones((), dtype=dtype),
        "ratio_max": r.max() if r.numel() else torch.ones((), dtype=dtype),
    }


def clipped_policy_loss(
    logps: torch.Tensor,
    old_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    eps_low: float,
    eps_high: float,
    aggregation: str = "token_mean",
    ref_logps: torch.Tensor | None = None,
    kl_beta: float = 0.0,
    is_weights: torch.Tensor | None = None,
    num_tokens: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """PPO-style clipped surrogate with decoupled clip range (DAPO, Yu et al. 2025) and optional k3 KL.

    Shapes: ``logps, old_logps, mask``: ``(B, T)``; ``advantages``: ``(B,)`` or ``(B, T)``;
    ``ref_logps``: ``(B, T)`` (required when ``kl_beta != 0``); ``is_weights``: ``(B, T)`` or ``(B, 1)``
    rollout/trainer mismatch weights from ``is_correction.truncated_is_weights`` (detached).

    Per token, with ``r = exp(logps - old_logps)``::

        l_t = -min(r * A, clip(r, 1 - eps_low, 1 + eps_high) * A) * w_t + kl_beta * k3(logps, ref_logps)

    Aggregation over masked tokens:
      - ``"token_mean"`` (DAPO; TRL ``loss_type="dapo"``): ``sum_{b,t} m l / N`` with ``N = num_tokens``
        if given (the token count of the whole accumulation window), else ``mask.sum()``.
      - ``"sequence_mean"`` (GRPO; TRL ``loss_type="grpo"``): per-sequence mean over its tokens, then the
        mean over all B rows (:func:`mean_over_all_rows`: a row with no tokens contributes 0, as in TRL).
    The KL term is added per token before aggregation, as in TRL (verl adds it after aggregating; the
    two agree for token_mean). ``old_logps`` is detached here: pass ``logps.detach()`` when
    ``num_iterations == 1``.

    Metrics (detached, masked token means unless noted): ``policy_loss`` (aggregated surrogate without
    KL), ``clip_frac_low`` (r < 1 - eps_low and A < 0), ``clip_frac_high`` (r > 1 + eps_high and A > 0),
    ``clip_frac`` (either; same definitions as TRL's clip_ratio/*), ``ratio_mean``, ``ratio_min``,
    ``ratio_max`` (over masked tokens), ``kl`` (mean k3, only when ``ref_logps`` is given).
    """
    advantages = _checked_advantages(logps, old_logps, advantages, mask, aggregation=aggregation, eps_low=eps_low,
                                     eps_high=eps_high, kl_beta=kl_beta, ref_logps=ref_logps)
    mask = mask.to(logps.dtype)
    advantages = advantages.to(logps.dtype)
    ratio = torch.exp(logps - old_logps.detach())
    clipped = torch.clamp(ratio, 1.0 - eps_low, 1.0 + eps_high)
    per_token = -torch.min(ratio * advantages, clipped * advantages)
    if is_weights is not None:
        per_token = per_token * is_weights.detach().to(logps.dtype)

    kl = None
    total = per_token
    if ref_logps is not None:
        kl = k3_kl(logps, ref_logps.detach())
        if kl_beta != 0.0:
            total = per_token + kl_beta * kl

    loss = _aggregate(total, mask, aggregation, num_tokens)

    metrics = _clip_metrics(ratio, advantages, mask, per_token, eps_low=eps_low, eps_high=eps_high,
                            aggregation=aggregation, num_tokens=num_tokens, dtype=logps.dtype)
    if kl is not None:
        metrics["kl"] = _masked_mean(kl.detach(), mask)
    return loss, metrics


def sft_coef_at(step: int, *, coef: float, schedule: str = "constant", max_steps: int | None = None) -> float:
    """The weight of the SFT term at optimizer step ``step`` (0-based; CHORD's scheduled weight, arXiv 2508.11408):
    ``"constant"``: ``coef``; ``"linear_decay"``: ``coef * max(0, 1 - step / max_steps)`` (``coef`` at step 0, 0 from
    ``max_steps`` on; needs ``max_steps >= 1``)."""
    if schedule not in SFT_SCHEDULES:
        raise ValueError(f"schedule must be one of {SFT_SCHEDULES}; got {schedule!r}")
    if coef < 0:
        raise ValueError(f"coef must be >= 0; got {coef}")
    if schedule == "constant":
        return float(coef)
    if max_steps is None or max_steps < 1:
        raise ValueError(f"schedule='linear_decay' needs max_steps >= 1; got {max_steps}")
    return float(coef) * max(0.0, 1.0 - step / max_steps)


def sft_term(
    logps: torch.Tensor,
    mask: torch.Tensor,
    *,
    coef: float,
    num_tokens: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CHORD's SFT term (Zhang et al. 2025, arXiv 2508.11408): ``coef`` times the masked token NLL of target
    completions, to be added to the GRPO loss (the target rows are not rollouts: no ratio, no advantage).

    Shapes: ``logps``, ``mask``: ``(S, T)``, the per-token log-probs of the target tokens (aligned with their ids,
    as ``trainer.logprobs.logprobs.sequence_logprobs`` returns them) and a 0/1 mask of the target positions.

    ``loss = coef * sum_{s,t} mask * (-logps) / N`` with ``N = num_tokens`` if given (the SFT tokens of the whole
    step divided over its micro-batches and ranks, so the loop's mean over them is the step's token mean, as
    ``clipped_policy_loss``'s ``token_mean``), else ``mask.sum()`` (``trainer.algos.sft.masked_nll_loss``, token_mean).

    Metrics (detached): ``nll`` (the same sum over ``N``, without ``coef``), ``tokens`` (masked tokens here).
    """
    if coef < 0:
        raise ValueError(f"coef must be >= 0; got {coef}")
    if logps.dim() != 2 or logps.shape != mask.shape:
        raise ValueError(f"logps {tuple(logps.shape)} and mask {tuple(mask.shape)} must both be (S, T)")
    nll, m = masked_nll_loss(logps, None, mask, aggregation="token_mean", num_items=num_tokens)
    return coef * nll, {"nll": nll.detach(), "tokens": m["num_tokens"]}
