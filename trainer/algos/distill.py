"""Privileged-teacher distillation losses (Taste-Bench, docs/taste.md#distillation), as pure tensor functions.

Public API (names are stable):

- ``topk_forward_kl(teacher_logits, student_logits, mask, *, k, support="teacher", temperature=1.0)
  -> (loss, metrics)``
- ``gathered_forward_kl(teacher_logp, student_logp, valid, mask, *, vocab) -> (loss, metrics)``: the same
  KL from log-probs already gathered on the support (no ``(..., V)`` tensor)
- ``topk_support_index(teacher_topk, student_topk, support) -> (index, valid)``
- ``choice_kl(teacher_logits_AB, student_logits_AB, *, temperature=1.0) -> (loss, metrics)``
- ``choice_ce(student_logits_AB, labels, *, temperature) -> (loss, metrics)``

The teacher is always detached: gradients flow into the student only (teacher and student share the
base + LoRA, so without the stop-gradient the teacher would be pulled towards the student).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from trainer.algos.choices import SUPPORTS

__all__ = ["topk_forward_kl", "gathered_forward_kl", "topk_support_index", "choice_kl", "choice_ce"]


def _upcast(x: torch.Tensor) -> torch.Tensor:
    """Half-precision logits are upcast to float32; float32/float64 are kept."""
    return x.float() if x.dtype in (torch.float16, torch.bfloat16) else x


def _log1mexp(log_x: torch.Tensor) -> torch.Tensor:
    """log(1 - exp(log_x)) for log_x < 0, accurate on both sides of -log 2 (Maechler 2012)."""
    # Each branch sees an input clamped to its own side, so the branch torch.where discards cannot
    # produce inf/NaN gradients (0 * inf) for the branch it keeps.
    cut = -math.log(2.0)
    near_zero = torch.log(-torch.expm1(log_x.clamp(min=cut)))
    far = torch.log1p(-torch.exp(log_x.clamp(max=cut)))
    return torch.where(log_x > cut, near_zero, far)


def topk_support_index(teacher_topk: torch.Tensor | None, student_topk: torch.Tensor | None, support: str
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """The support's token ids and which of them count: ``(index (..., S), valid (..., S) bool)``.

    ``teacher_topk``, ``student_topk``: ``(..., K)`` token ids (each side's top-K; the one the support does
    not use may be None). ``"teacher"`` / ``"student"``: that side's ids, all valid (``S = K``);
    ``"union"``: the teacher's ids then the student's (``S = 2K``), a student id that is also among the
    teacher's marked invalid so that no token is counted twice."""
    if support not in SUPPORTS:
        raise ValueError(f"support must be one of {SUPPORTS}; got {support!r}")
    if support == "teacher":
        return teacher_topk, torch.ones_like(teacher_topk, dtype=torch.bool)
    if support == "student":
        return student_topk, torch.ones_like(student_topk, dtype=torch.bool)
    dup = (student_topk.unsqueeze(-1) == teacher_topk.unsqueeze(-2)).any(dim=-1)  # already in the teacher's
    return torch.cat([teacher_topk, student_topk], dim=-1), torch.cat([torch.ones_like(dup), ~dup], dim=-1)


def gathered_forward_kl(
    teacher_logp: torch.Tensor,
    student_logp: torch.Tensor,
    valid: torch.Tensor,
    mask: torch.Tensor,
    *,
    vocab: int,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The top-K forward KL with its remainder bucket from the *gathered* log-probs (``topk_forward_kl``'s formula).

    Shapes: ``teacher_logp, student_logp``: ``(..., S)`` full-vocabulary log-probs (already at the KL
    temperature: ``log softmax(logits / T)``) of the support's tokens at each position; ``valid``:
    ``(..., S)`` bool, False for entries that are not part of the support (the union's duplicates,
    padding); ``mask``: ``(...)`` 0/1, the positions that count; ``vocab``: V (a support of V valid
    tokens leaves an empty bucket, which is skipped exactly). Teacher detached. Per position::

        KL_S = sum_{v in S} p_T(v) log(p_T(v) / p_S(v)) + p_T(R) log(p_T(R) / p_S(R)),  p(R) = 1 - sum_S p(v)

    Returns the mean of ``KL_S`` over the masked positions and the metrics of ``topk_forward_kl``. Lets a
    caller that never builds ``(..., V)`` logits (``trainer/distill/gathered.py:distill_logprobs`` projects hidden
    states ``chunk`` positions at a time and keeps only the gathered values) use the same formula.
    """
    if teacher_logp.shape != student_logp.shape or valid.shape != teacher_logp.shape:
        raise ValueError(f"teacher_logp {tuple(teacher_logp.shape)}, student_logp {tuple(student_logp.shape)} and "
                         f"valid {tuple(valid.shape)} must have the same shape (..., S)")
    if mask.shape != teacher_logp.shape[:-1]:
        raise ValueError(f"mask {tuple(mask.shape)} must be the log-probs' shape without S: "
                         f"{tuple(teacher_logp.shape[:-1])}")
    dtype = torch.promote_types(_upcast(teacher_logp).dtype, _upcast(student_logp).dtype)
    logp_t = teacher_logp.detach().to(dtype)
    logp_s = student_logp.to(dtype)
    valid = valid.bool()
    zero = torch.zeros_like(logp_t)
    neg_inf = torch.tensor(float("-inf"), dtype=logp_t.dtype, device=logp_t.device)
    p_t = torch.where(valid, logp_t.exp(), zero)
    in_support = (p_t * torch.where(valid, logp_t - logp_s, zero)).sum(dim=-1)

    has_rest = valid.sum(dim=-1) < vocab  # with |S| == V the bucket is empty: skip it exactly (0 log 0/0 := 0)
    tiny = torch.finfo(logp_t.dtype).eps
    log_mass_t = torch.logsumexp(torch.where(valid, logp_t, neg_inf), dim=-1)
    log_mass_s = torch.logsumexp(torch.where(valid, logp_s, neg_inf), dim=-1)
    # Clamp below 0 so the bucket's log-mass stays finite when rounding makes the support sum to >= 1.
    log_rest_t = _log1mexp(log_mass_t.clamp(max=-tiny))
    log_rest_s = _log1mexp(log_mass_s.clamp(max=-tiny))
    rest = torch.where(has_rest, log_rest_t.exp() * (log_rest_t - log_rest_s), torch.zeros_like(in_support))

    kl = in_support + rest
    m = mask.to(kl.dtype)
    n = m.sum()
    loss = (kl * m).sum() / n.clamp_min(1.0)
    with torch.no_grad():
        metrics = {
            "kl": loss.detach(),
            "teacher_mass": (log_mass_t.exp() * m).sum() / n.clamp_min(1.0),
            "student_mass": (log_mass_s.detach().exp() * m).sum() / n.clamp_min(1.0),
            "num_positions": n.detach(),
        }
    return loss, metrics


def topk_forward_kl(
    teacher_logits: torch.Tensor,
    student_logits: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: int,
    support: str = "teacher",
    temperature: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Forward KL ``sum_v p_T log(p_T / p_S)`` on a top-K support plus one remainder bucket (docs/taste.md#distillation).

    Shapes: ``teacher_logits, student_logits``: ``(..., V)`` at the *same* positions (the caller aligns
    the teacher-written tokens of the teacher view ``c_T`` with those of the student view ``c_S``);
    ``mask``: ``(...)`` 0/1, the positions that count (teacher-written reasoning tokens, at most 512
    sampled per view). Returns the token mean of the per-position KL over masked positions.

    Per position, with support ``S`` (``"teacher"``: the teacher's top-k tokens; ``"student"``: the
    student's top-k, as the paper did; ``"union"``: both) and the remainder ``R = V \\ S``::

        KL_S = sum_{v in S} p_T(v) log(p_T(v) / p_S(v)) + p_T(R) log(p_T(R) / p_S(R)),
        p(R) = 1 - sum_{v in S} p(v)

    Both distributions are the full softmax of ``logits / temperature``; the bucket keeps KL_S a proper
    KL between two (|S|+1)-way distributions, so ``0 <= KL_S <= KL`` (data processing inequality) and
    ``KL_S = KL`` when ``k >= V``. A thin wrapper: picks the support (``topk_support_index``), gathers the
    log-probs of its tokens (``logits - logsumexp``, no full ``log_softmax``) and calls
    ``gathered_forward_kl``, the one formula. Differs from TRL 1.16's ``DistillationTrainer`` (generalized
    JSD with ``beta=0`` = forward KL), which always uses the full vocabulary; with ``k >= V`` the two agree.

    Metrics (detached): ``kl`` (= loss), ``teacher_mass`` / ``student_mass`` (mean probability mass the
    support covers), ``num_positions``.
    """
    if support not in SUPPORTS:
        raise ValueError(f"support must be one of {SUPPORTS}; got {support!r}")
    if teacher_logits.shape != student_logits.shape:
        raise ValueError(f"teacher_logits {tuple(teacher_logits.shape)} and student_logits "
                         f"{tuple(student_logits.shape)} must have the same shape (..., V)")
    if mask.shape != teacher_logits.shape[:-1]:
        raise ValueError(f"mask {tuple(mask.shape)} must be the logits' shape without V: "
                         f"{tuple(teacher_logits.shape[:-1])}")
    if k < 1:
        raise ValueError(f"k must be >= 1; got {k}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0; got {temperature}")

    vocab = teacher_logits.shape[-1]
    k = min(k, vocab)
    t = _upcast(teacher_logits.detach()) / temperature
    s = _upcast(student_logits) / temperature
    idx_t = t.topk(k, dim=-1).indices if support != "student" else None
    idx_s = s.detach().topk(k, dim=-1).indices if support != "teacher" else None
    idx, valid = topk_support_index(idx_t, idx_s, support)
    logp_t = t.gather(-1, idx) - torch.logsumexp(t, dim=-1, keepdim=True)
    logp_s = s.gather(-1, idx) - torch.logsumexp(s, dim=-1, keepdim=True)
    loss, metrics = gathered_forward_kl(logp_t, logp_s, valid, mask, vocab=vocab)
    return loss.to(student_logits.dtype), metrics


def choice_kl(
    teacher_logits_AB: torch.Tensor,
    student_logits_AB: torch.Tensor,
    *,
    temperature: float = 1.0,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """2-way forward KL at the final choice position (docs/taste.md#distillation, stage 1), mean over the batch.

    Shapes: ``(B, 2)`` logits of the tokens for "A" and "B" (any ``(B, C)`` works), teacher detached.
    ``KL_i = sum_c q_c log(q_c / p_c)`` with ``q = softmax(teacher / T)``, ``p = softmax(student / T)``.
    No ``T**2`` rescaling (Hinton et al.'s convention is not applied; the paper sums the two KL terms
    with weight 1). Metrics: ``kl``, ``agreement`` (argmax of student == argmax of teacher).
    """
    if teacher_logits_AB.shape != student_logits_AB.shape or teacher_logits_AB.dim() != 2:
        raise ValueError(f"choice logits must both be (B, C); got {tuple(teacher_logits_AB.shape)} and "
                         f"{tuple(student_logits_AB.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    log_q = F.log_softmax(_upcast(teacher_logits_AB.detach()) / temperature, dim=-1)
    log_p = F.log_softmax(_upcast(student_logits_AB) / temperature, dim=-1)
    kl_rows = (log_q.exp() * (log_q - log_p)).sum(dim=-1)
    loss = kl_rows.mean()
    metrics = {
        "kl": loss.detach(),
        "agreement": (log_q.argmax(-1) == log_p.detach().argmax(-1)).float().mean(),
    }
    return loss.to(student_logits_AB.dtype), metrics


def choice_ce(
    student_logits_AB: torch.Tensor,
    labels: torch.Tensor,
    *,
    temperature: float,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Cross-entropy at the choice position against the label (docs/taste.md#distillation, stage 2 calibration, T = 2.0).

    Shapes: ``student_logits_AB (B, C)``, ``labels (B,)`` int in ``[0, C)`` (0 = "A").
    ``loss = mean_i -log softmax(logits_i / T)[label_i]``. Metrics: ``ce``, ``accuracy`` (argmax ==
    label), ``p_label`` (mean probability of the label at temperature T).
    """
    if student_logits_AB.dim() != 2 or labels.shape != student_logits_AB.shape[:1]:
        raise ValueError(f"expected logits (B, C) and labels (B,); got {tuple(student_logits_AB.shape)} and "
                         f"{tuple(labels.shape)}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0; got {temperature}")
    num_choices = student_logits_AB.shape[1]
    if bool(((labels < 0) | (labels >= num_choices)).any()):
        raise ValueError(f"labels must be in [0, {num_choices}); got {labels.tolist()}")
    log_p = F.log_softmax(_upcast(student_logits_AB) / temperature, dim=-1)
    nll = -log_p.gather(-1, labels.long().unsqueeze(-1)).squeeze(-1)
    loss = nll.mean()
    metrics = {
        "ce": loss.detach(),
        "accuracy": (log_p.detach().argmax(-1) == labels).float().mean(),
        "p_label": (-nll.detach()).exp().mean(),
    }
    return loss.to(student_logits_AB.dtype), metrics
