"""Sigmoid DPO on full-completion log-probs, as pure tensor functions.

Public API (names are stable):

- ``dpo_row_metrics(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, *, beta)
  -> dict[str, Tensor (B,)]``
- ``sigmoid_dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, *, beta,
  label_smoothing=0.0, weights=None) -> (loss, metrics)``
- ``chosen_nll_loss(policy_chosen_logps, chosen_token_counts) -> (loss, metrics)``: RPO's NLL term
- ``per_group_metrics(row_metrics, groups, *, names=...) -> dict[str, float]``
- ``DPO_LOSSES``: ``{name: loss}``, the DPO-style losses ``algo.loss_type`` picks from (``dpo_loss(name)``
  looks one up). Every loss has :func:`sigmoid_dpo_loss`'s signature ``(pc, pr, rc, rr, *, beta,
  label_smoothing, weights) -> (scalar loss, metrics)`` and returns at least its metric keys; one that has no
  use for ``label_smoothing`` raises ``ValueError`` when it is not 0. To add one: the function here, its
  entry below, and its name in ``DPO_LOSS_TYPES`` (:mod:`trainer.algos.choices`, torch-free, so the config
  can offer it); docs/architecture.md#how-to-add.

All log-probs are *summed* over completion tokens (see ``trainer.model.logprobs.sequence_logprobs``).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from .choices import DPO_LOSS_TYPES

__all__ = ["dpo_row_metrics", "sigmoid_dpo_loss", "chosen_nll_loss", "per_group_metrics", "DPO_LOSSES", "dpo_loss"]


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    first = next(iter(shapes.values()))
    if len(first) != 1 or any(s != first for s in shapes.values()):
        raise ValueError(f"DPO log-probs must all be 1-D of the same length (B,); got shapes {shapes}")


def dpo_row_metrics(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    *,
    beta: float,
) -> dict[str, torch.Tensor]:
    """Per-pair DPO statistics, detached: the rows a per-condition breakdown is computed from.

    Shapes: every input ``(B,)`` (summed completion log-probs); every output ``(B,)``.

    Returns ``chosen_rewards = beta*(pi_c - ref_c)``, ``rejected_rewards = beta*(pi_r - ref_r)``,
    ``margins = chosen_rewards - rejected_rewards`` (= beta*Delta of docs/scope.md#objective) and
    ``accuracies = 1[chosen_rewards > rejected_rewards]`` (strict, as TRL: a tie counts as wrong, so
    at step 0 with policy == reference the accuracy is 0).
    """
    _check_same_shape(policy_chosen_logps=policy_chosen_logps, policy_rejected_logps=policy_rejected_logps,
                      ref_chosen_logps=ref_chosen_logps, ref_rejected_logps=ref_rejected_logps)
    with torch.no_grad():
        chosen = beta * (policy_chosen_logps.detach() - ref_chosen_logps.detach())
        rejected = beta * (policy_rejected_logps.detach() - ref_rejected_logps.detach())
        margins = chosen - rejected
        return {
            "chosen_rewards": chosen,
            "rejected_rewards": rejected,
            "margins": margins,
            "accuracies": (chosen > rejected).to(chosen.dtype),
        }


def sigmoid_dpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor,
    ref_rejected_logps: torch.Tensor,
    *,
    beta: float,
    label_smoothing: float = 0.0,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Sigmoid DPO (Rafailov et al. 2023, eq. 7) with conservative label smoothing (cDPO, Mitchell 2023).

    Shapes: ``policy_*_logps``, ``ref_*_logps``: ``(B,)`` summed log-probs of the full completion;
    ``weights``: ``(B,)`` non-negative, or None. Returns a scalar loss and scalar metrics.

    Per pair, with ``Delta = (pi_c - ref_c) - (pi_r - ref_r)`` and ``eps = label_smoothing``::

        l_i = -[(1 - eps) * log sigma(beta * Delta) + eps * log sigma(-beta * Delta)]

    Reduction: the plain mean over pairs when ``weights`` is None; otherwise the weighted mean
    ``sum_i w_i l_i / sum_i w_i`` (a batch whose weights are all zero gives a loss of 0 that is still
    attached to the graph). For SCOPE's ``L = sum_b lambda_b L_b`` *inside one batch* pass
    ``w_i = lambda_b(i) / n_b(i)`` where ``n_b`` counts the batch rows of condition b; ``w_i =
    lambda_b(i)`` instead gives ``sum_b lambda_b n_b L_b / sum_b lambda_b n_b``.

    Differs from TRL 1.16: its ``loss_type="sigmoid"`` ignores ``label_smoothing`` (it only feeds the
    robust/EXO/AOT losses); with ``eps=0`` the two are identical; the cDPO form here is what TRL < 1.0
    used for ``sigmoid``. TRL has no per-row weights.

    Metrics (detached 0-dim tensors, unweighted means over the batch): ``loss`` (same as returned, detached),
    ``rewards/chosen``, ``rewards/rejected``, ``rewards/margins``, ``rewards/accuracies``,
    ``logps/chosen``, ``logps/rejected``.
    """
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5); got {label_smoothing}")
    rows = dpo_row_metrics(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps,
                           beta=beta)
    delta = (policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps)
    losses = -F.logsigmoid(beta * delta)
    if label_smoothing > 0.0:
        losses = (1.0 - label_smoothing) * losses - label_smoothing * F.logsigmoid(-beta * delta)

    if weights is None:
        loss = losses.mean()
    else:
        weights = torch.as_tensor(weights, dtype=losses.dtype, device=losses.device)
        if weights.shape != losses.shape:
            raise ValueError(f"weights must have shape {tuple(losses.shape)} (one per pair); got {tuple(weights.shape)}")
        if bool((weights < 0).any()) or not bool(torch.isfinite(weights).all()):
            raise ValueError(f"weights must be finite and >= 0; got {weights.tolist()}")
        loss = (weights * losses).sum() / weights.sum().clamp_min(torch.finfo(losses.dtype).tiny)

    metrics = {
        "loss": loss.detach(),
        "rewards/chosen": rows["chosen_rewards"].mean(),
        "rewards/rejected": rows["rejected_rewards"].mean(),
        "rewards/margins": rows["margins"].mean(),
        "rewards/accuracies": rows["accuracies"].mean(),
        "logps/chosen": policy_chosen_logps.detach().mean(),
        "logps/rejected": policy_rejected_logps.detach().mean(),
    }
    return loss, metrics


def chosen_nll_loss(
    policy_chosen_logps: torch.Tensor,
    chosen_token_counts: torch.Tensor,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """RPO's NLL term (Pang et al. 2024, "Iterative Reasoning Preference Optimization"): the token-mean negative
    log-likelihood of the chosen completions, added to a DPO loss with a weight (``algo.rpo_alpha``) so that
    pushing r- down cannot drag r+ (and the answer format it carries) down with it.

    Shapes: ``policy_chosen_logps``: ``(B,)`` summed log-probs of each chosen completion;
    ``chosen_token_counts``: ``(B,)`` its completion token counts. Returns
    ``-sum_i logp_i / sum_i n_i`` (0, still attached to the graph, when no row has a token) and the metric
    ``nll/chosen`` (the same value, detached).

    The same value as TRL 1.16's ``loss_type="sft"`` term (``-per_token_logps[chosen_mask].mean()`` over the
    batch's chosen tokens): TRL's RPO is ``loss_type=["sigmoid", "sft"], loss_weights=[1.0, rpo_alpha]``. It
    takes summed log-probs rather than per-token ones so the shared-prompt packing (which returns sums) can use it.
    """
    _check_same_shape(policy_chosen_logps=policy_chosen_logps, chosen_token_counts=chosen_token_counts)
    counts = chosen_token_counts.to(policy_chosen_logps.dtype)
    loss = -policy_chosen_logps.sum() / counts.sum().clamp_min(1.0)
    return loss, {"nll/chosen": loss.detach()}


#: ``algo.loss_type`` -> the loss; the keys are ``trainer.algos.choices.DPO_LOSS_TYPES`` (tests/test_algos_dpo.py).
DPO_LOSSES = {"sigmoid": sigmoid_dpo_loss}


def dpo_loss(name: str):
    """The DPO-style loss registered as ``name`` in :data:`DPO_LOSSES`."""
    try:
        return DPO_LOSSES[name]
    except KeyError:
        raise ValueError(f"unknown DPO loss {name!r}; registered: {sorted(DPO_LOSSES)} "
                         f"(the config offers {DPO_LOSS_TYPES})") from None


_DEFAULT_GROUP_NAMES = {"accuracies": "rewards/accuracies", "margins": "rewards/margins",
                        "chosen_rewards": "rewards/chosen", "rejected_rewards": "rewards/rejected"}


def per_group_metrics(
    row_metrics: dict[str, torch.Tensor],
    groups: Sequence[str],
    *,
    names: dict[str, str] | None = None,
) -> dict[str, float]:
    """Mean of each per-row metric within each group (e.g. condition), keyed ``"<name>/<group>"``.

    ``row_metrics``: ``{key: Tensor (B,)}`` as returned by :func:`dpo_row_metrics` (any key works);
    ``groups``: ``B`` group names, one per row (pair). ``names`` maps a row key to its logged name;
    the default maps ``accuracies -> rewards/accuracies`` etc., so the output looks like
    ``{"rewards/accuracies/misleading": 1.0, "rewards/margins/misleading": 0.3, ...}``. Keys not in
    ``names`` are logged under their own name. Groups absent from the batch are absent from the output
    (not zero) so a logger averaging over steps is not biased by empty groups.
    """
    names = _DEFAULT_GROUP_NAMES if names is None else names
    groups = list(groups)
    out: dict[str, float] = {}
    for key, values in row_metrics.items():
        if values.dim() != 1 or values.shape[0] != len(groups):
            raise ValueError(f"row metric {key!r} has shape {tuple(values.shape)}; expected ({len(groups)},) "
                             "to match the number of group names")
        label = names.get(key, key)
        for group in dict.fromkeys(groups):  # first-seen order
            idx = torch.tensor([i for i, g in enumerate(groups) if g == group], device=values.device)
            out[f"{label}/{group}"] = values.detach().index_select(0, idx).float().mean().item()
    return out
