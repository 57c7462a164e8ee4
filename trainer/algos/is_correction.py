"""Truncated importance sampling between rollout-server and trainer log-probs, as a pure function.

Public API (names are stable):

- ``truncated_is_weights(trainer_logps, rollout_logps, mask, *, level="token", cap=2.0) -> (weights, metrics)``

The rollout engine (vLLM) samples from ``pi_rollout`` while the trainer computes ``pi_trainer`` for the
same weights; kernels and precision make them differ. Multiplying the per-token policy loss by
``w = min(pi_trainer / pi_rollout, cap)`` corrects the mismatch with bounded variance (truncated IS,
Yao et al. 2025, "Your efficient RL framework secretly brings you off-policy RL training").
"""

from __future__ import annotations

import torch

from trainer.algos.choices import LEVELS

__all__ = ["truncated_is_weights"]


def truncated_is_weights(
    trainer_logps: torch.Tensor,
    rollout_logps: torch.Tensor,
    mask: torch.Tensor,
    *,
    level: str = "token",
    cap: float = 2.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Detached truncated IS weights ``min(exp(logp_trainer - logp_rollout), cap)``.

    Shapes: ``trainer_logps, rollout_logps, mask``: ``(B, T)``. Returns ``weights`` of shape ``(B, T)``
    for ``level="token"`` and ``(B, 1)`` for ``level="sequence"`` (broadcasts against ``(B, T)``), always
    detached. Sequence level uses the product of the token ratios, ``exp(sum_t m_t (lp_trainer -
    lp_rollout))``, then caps it. Unmasked positions, and tokens whose rollout log-prob is NaN (a server
    that could not score them), get a log-ratio of 0, i.e. weight 1 — the same convention as TRL 1.16
    (``vllm_importance_sampling_mode="token_truncate"|"sequence_truncate"``, with
    ``vllm_importance_sampling_cap``); TRL also has masking modes and a lower clip, which we do not.

    Metrics (over masked tokens for token level, over sequences with >= 1 token for sequence level):
    ``is_ratio_mean`` (before capping), ``is_weight_mean`` (after), ``is_frac_capped``,
    ``logp_abs_diff_mean`` (mean |lp_trainer - lp_rollout| over masked tokens, the sync-probe quantity),
    ``logp_abs_diff_max``.
    """
    if level not in LEVELS:
        raise ValueError(f"level must be one of {LEVELS}; got {level!r}")
    if not cap > 0:
        raise ValueError(f"cap must be > 0; got {cap}")
    if trainer_logps.shape != rollout_logps.shape or trainer_logps.shape != mask.shape or trainer_logps.dim() != 2:
        raise ValueError(f"trainer_logps {tuple(trainer_logps.shape)}, rollout_logps {tuple(rollout_logps.shape)} "
                         f"and mask {tuple(mask.shape)} must all be (B, T)")

    with torch.no_grad():
        dtype = torch.float64 if trainer_logps.dtype == torch.float64 else torch.float32
        m = mask.to(dtype)
        diff = trainer_logps.detach().to(dtype) - rollout_logps.detach().to(dtype)
        diff = torch.nan_to_num(diff, nan=0.0) * m
        counted = mask.bool() & ~torch.isnan(rollout_logps)
        n_tok = counted.sum().clamp_min(1)
        abs_diff = diff.abs()

        if level == "token":
            log_ratio = diff
            unit = counted
        else:
            log_ratio = diff.sum(dim=1, keepdim=True)
            unit = counted.any(dim=1, keepdim=True)
        ratio = torch.exp(log_ratio.clamp(max=80.0))  # keeps the metric finite; weights are capped anyway
        weights = torch.clamp(ratio, max=cap)
        capped = ratio > cap
        n_unit = unit.sum().clamp_min(1)
        metrics = {
            "is_ratio_mean": (ratio * unit).sum() / n_unit,
            "is_weight_mean": (weights * unit).sum() / n_unit,
            "is_frac_capped": (capped & unit).sum() / n_unit,
            "logp_abs_diff_mean": (abs_diff * counted).sum() / n_tok,
            "logp_abs_diff_max": abs_diff[counted].max() if bool(counted.any()) else abs_diff.new_zeros(()),
        }
    return weights.to(trainer_logps.dtype), metrics
