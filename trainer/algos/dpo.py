"""DPO-style preference losses on completion log-probs, as pure tensor functions.

Public API (names are stable):

- ``dpo_row_metrics(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, *, beta)
  -> dict[str, Tensor (B,)]`` (reference log-probs None for a reference-free loss)
- ``sigmoid_dpo_loss(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps, *, beta,
  label_smoothing=0.0, weights=None) -> (loss, metrics)``
- ``simpo_loss(policy_chosen_logps, policy_rejected_logps, *, beta, gamma, label_smoothing=0.0, weights=None)
  -> (loss, metrics)``: reference-free, on length-normalised log-probs
- ``chosen_nll_loss(policy_chosen_logps, chosen_token_counts) -> (loss, metrics)``: RPO's NLL term
- ``per_group_metrics(row_metrics, groups, *, names=...) -> dict[str, float]``
- ``DPOLoss``: a loss and what it needs: a reference or none, summed or length-normalised (mean per completion
  token) log-probs, and its own hyperparameters (``{keyword: algo config key}``).
- ``SIGMOID``, ``SIMPO``: the shipped losses as :class:`DPOLoss` objects; ``algo.loss_type`` names them through
  the registry ``trainer.dpo.losses.DPO_LOSSES`` (torch-free, so the config can check a name without importing this
  module; ``dpo_loss(name)`` there looks one up). A loss with a reference has :func:`sigmoid_dpo_loss`'s signature
  ``(pc, pr, rc, rr, *, beta, label_smoothing, weights, **its hyperparameters)``; a reference-free one
  ``(pc, pr, *, ...)``; both return ``(scalar loss, metrics)`` with at least :func:`sigmoid_dpo_loss`'s metric
  keys; one that has no use for ``label_smoothing`` raises ``ValueError`` when it is not 0. To add one: the
  function and its ``DPOLoss`` here, and its line in ``trainer/dpo/losses.py``'s ``BUILTIN`` (or, from another
  package, an entry point in group ``selectrust.dpo_losses``); a new hyperparameter is also a field of
  ``DPOAlgoConfig``; docs/architecture.md#how-to-add.

The step (``trainer/dpo/step.py``) computes log-probs *summed* over completion tokens (see
``trainer.logprobs.logprobs.sequence_logprobs``) and hands each loss the kind it declares
(:meth:`DPOLoss.sequence_logps`); it builds no reference for a reference-free loss.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

__all__ = ["dpo_row_metrics", "sigmoid_dpo_loss", "simpo_loss", "chosen_nll_loss", "per_group_metrics", "DPOLoss",
           "SIGMOID", "SIMPO"]


def _check_same_shape(**tensors: torch.Tensor) -> None:
    shapes = {name: tuple(t.shape) for name, t in tensors.items()}
    first = next(iter(shapes.values()))
    if len(first) != 1 or any(s != first for s in shapes.values()):
        raise ValueError(f"DPO log-probs must all be 1-D of the same length (B,); got shapes {shapes}")


def dpo_row_metrics(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    ref_chosen_logps: torch.Tensor | None,
    ref_rejected_logps: torch.Tensor | None,
    *,
    beta: float,
) -> dict[str, torch.Tensor]:
    """Per-pair DPO statistics, detached: the rows a per-condition breakdown is computed from.

    Shapes: every input ``(B,)`` (the log-probs the loss takes: summed, or mean per token); every output ``(B,)``.
    ``ref_*_logps`` None (both): a reference-free loss, whose rewards are ``beta * pi`` (as TRL's CPO/SimPO log them).

    Returns ``chosen_rewards = beta*(pi_c - ref_c)``, ``rejected_rewards = beta*(pi_r - ref_r)``,
    ``margins = chosen_rewards - rejected_rewards`` (= beta*Delta of docs/scope.md#objective) and
    ``accuracies = 1[chosen_rewards > rejected_rewards]`` (strict, as TRL: a tie counts as wrong, so
    at step 0 with policy == reference the accuracy is 0).
    """
    if (ref_chosen_logps is None) != (ref_rejected_logps is None):
        raise ValueError("ref_chosen_logps and ref_rejected_logps must both be given, or both be None (no reference)")
    if ref_chosen_logps is None:
        ref_chosen_logps = ref_rejected_logps = torch.zeros_like(policy_chosen_logps)
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
    _check_label_smoothing(label_smoothing)
    rows = dpo_row_metrics(policy_chosen_logps, policy_rejected_logps, ref_chosen_logps, ref_rejected_logps,
                           beta=beta)
    delta = (policy_chosen_logps - ref_chosen_logps) - (policy_rejected_logps - ref_rejected_logps)
    losses = _smoothed_logsigmoid_loss(beta, delta, label_smoothing)
    loss = _weighted_mean(losses, weights)
    return loss, _pair_metrics(loss, rows, policy_chosen_logps, policy_rejected_logps)


def simpo_loss(
    policy_chosen_logps: torch.Tensor,
    policy_rejected_logps: torch.Tensor,
    *,
    beta: float,
    gamma: float,
    label_smoothing: float = 0.0,
    weights: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """SimPO (Meng et al. 2024, "SimPO: Simple Preference Optimization with a Reference-Free Reward", eq. 6):
    reference-free, on length-normalised log-probs, with a target reward margin ``gamma``.

    Shapes: ``policy_*_logps``: ``(B,)`` *mean per-token* log-probs of the full completion (the summed log-prob
    over the completion's token count; registered with ``logps="mean"``); ``weights``: ``(B,)`` non-negative, or
    None. Returns a scalar loss and scalar metrics.

    Per pair, with ``z = beta * (pi_c - pi_r) - gamma`` and ``eps = label_smoothing``::

        l_i = -[(1 - eps) * log sigma(z) + eps * log sigma(-z)]

    Reduction as :func:`sigmoid_dpo_loss` (plain or weighted mean). The same value as TRL 1.16's
    ``CPOTrainer`` with ``loss_type="simpo"``, ``simpo_gamma=gamma`` and ``cpo_alpha=0`` (its ``logits = (pi_c -
    pi_r) - gamma / beta``, then the same smoothed log-sigmoid of ``beta * logits``); TRL has no per-row weights.
    ``algo.rpo_alpha`` adds CPO's NLL term on the chosen completions (TRL: ``cpo_alpha``).

    Metrics: as :func:`sigmoid_dpo_loss`, with the reference-free rewards ``beta * pi`` (TRL's CPO/SimPO rewards:
    ``rewards/margins`` is ``beta * (pi_c - pi_r)``, without ``gamma``).
    """
    _check_label_smoothing(label_smoothing)
    rows = dpo_row_metrics(policy_chosen_logps, policy_rejected_logps, None, None, beta=beta)
    logits = (policy_chosen_logps - policy_rejected_logps) - gamma / beta  # TRL's form: beta * logits = z
    losses = _smoothed_logsigmoid_loss(beta, logits, label_smoothing)
    loss = _weighted_mean(losses, weights)
    return loss, _pair_metrics(loss, rows, policy_chosen_logps, policy_rejected_logps)


def _check_label_smoothing(label_smoothing: float) -> None:
    if not 0.0 <= label_smoothing < 0.5:
        raise ValueError(f"label_smoothing must be in [0, 0.5); got {label_smoothing}")


def _smoothed_logsigmoid_loss(beta: float, x: torch.Tensor, label_smoothing: float) -> torch.Tensor:
    """``-[(1 - eps) log sigma(beta x) + eps log sigma(-beta x)]`` per pair, ``(B,) -> (B,)`` (``eps = 0``:
    ``-log sigma(beta x)``)."""
    losses = -F.logsigmoid(beta * x)
    if label_smoothing > 0.0:
        losses = (1.0 - label_smoothing) * losses - label_smoothing * F.logsigmoid(-beta * x)
    return losses


def _weighted_mean(losses: torch.Tensor, weights: torch.Tensor | None) -> torch.Tensor:
    """``(B,) -> ()``: the plain mean, or ``sum_i w_i l_i / sum_i w_i`` (0, still in the graph, when all w are 0)."""
    if weights is None:
        return losses.mean()
    weights = torch.as_tensor(weights, dtype=losses.dtype, device=losses.device)
    if weights.shape != losses.shape:
        raise ValueError(f"weights must have shape {tuple(losses.shape)} (one per pair); got {tuple(weights.shape)}")
    if bool((weights < 0).any()) or not bool(torch.isfinite(weights).all()):
        raise ValueError(f"weights must be finite and >= 0; got {weights.tolist()}")
    return (weights * losses).sum() / weights.sum().clamp_min(torch.finfo(losses.dtype).tiny)


def _pair_metrics(loss: torch.Tensor, rows: dict[str, torch.Tensor], policy_chosen_logps: torch.Tensor,
                  policy_rejected_logps: torch.Tensor) -> dict[str, torch.Tensor]:
    """The scalar metrics every DPO-style loss returns, from :func:`dpo_row_metrics`' rows (unweighted means)."""
    return {
        "loss": loss.detach(),
        "rewards/chosen": rows["chosen_rewards"].mean(),
        "rewards/rejected": rows["rejected_rewards"].mean(),
        "rewards/margins": rows["margins"].mean(),
        "rewards/accuracies": rows["accuracies"].mean(),
        "logps/chosen": policy_chosen_logps.detach().mean(),
        "logps/rejected": policy_rejected_logps.detach().mean(),
    }


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


LOGPS_KINDS = ("sum", "mean")


@dataclass(frozen=True)
class DPOLoss:
    """A DPO-style loss and what it needs from the step; ``trainer/dpo/step.py`` asks these, never the loss's name.

    - ``fn``: the pure loss. With ``reference``: ``fn(pc, pr, rc, rr, *, beta, label_smoothing, weights, **hp)``;
      reference-free: ``fn(pc, pr, *, beta, label_smoothing, weights, **hp)``.
    - ``reference``: whether it compares the policy with reference log-probs. False: the step builds no
      reference (no frozen copy, no precomputed table) and runs no reference forward.
    - ``logps``: ``"sum"`` (summed over completion tokens) or ``"mean"`` (length-normalised: the sum over the
      completion's token count), for the policy and the reference alike (:meth:`sequence_logps`).
    - ``hyperparameters``: ``{fn keyword: DPOAlgoConfig field}``, the loss's own settings beyond ``beta`` and
      ``label_smoothing`` (e.g. ``{"gamma": "simpo_gamma"}``), passed from ``algo.<field>``.
    """

    fn: Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]
    reference: bool = True
    logps: str = "sum"
    hyperparameters: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self):
        if self.logps not in LOGPS_KINDS:
            raise ValueError(f"DPOLoss.logps must be one of {LOGPS_KINDS}; got {self.logps!r}")

    def sequence_logps(self, summed_logps: torch.Tensor, token_counts: torch.Tensor) -> torch.Tensor:
        """The log-probs this loss takes, ``(N,)``, from summed completion log-probs ``(N,)`` and the completions'
        token counts ``(N,)``: the sums themselves, or per-token means (a completion without tokens counts 1)."""
        if self.logps == "sum":
            return summed_logps
        return summed_logps / token_counts.to(summed_logps.dtype).clamp_min(1.0)

    def __call__(self, policy_chosen_logps: torch.Tensor, policy_rejected_logps: torch.Tensor,
                 ref_chosen_logps: torch.Tensor | None = None, ref_rejected_logps: torch.Tensor | None = None,
                 **kwargs) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``fn`` on ``(B,)`` log-probs of :meth:`sequence_logps`' kind: the reference's for a loss with one (then
        required), none for a reference-free loss (then refused)."""
        given = ref_chosen_logps is not None or ref_rejected_logps is not None
        if given != self.reference:
            raise ValueError(f"{getattr(self.fn, '__name__', self.fn)} "
                             + ("needs reference log-probs" if self.reference else "is reference-free; got reference "
                                "log-probs"))
        refs = (ref_chosen_logps, ref_rejected_logps) if self.reference else ()
        return self.fn(policy_chosen_logps, policy_rejected_logps, *refs, **kwargs)


#: The shipped losses; their names (``algo.loss_type``) are their lines in ``trainer/dpo/losses.py``'s ``BUILTIN``
#: (tests/trainer/dpo/test_dpo_loss_registry.py).
SIGMOID = DPOLoss(sigmoid_dpo_loss)
SIMPO = DPOLoss(simpo_loss, reference=False, logps="mean", hyperparameters={"gamma": "simpo_gamma"})


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
