"""Stage 1's gathered log-probs (docs/taste.md#distillation-trainer): teacher and student reduced to what the
token KL and the choice KL need, without logits.

Each model's final hidden states are captured at the needed columns (the sampled positions and the choice
position, ``trainer/distill/aligned.py:aligned_hidden``) and projected through the LM head ``chunk`` positions
at a time (``trainer/logprobs/chunked_logprobs.py``), keeping only the log-probs of the top-K support and of the
choice tokens, so neither model's ``(B, T, V)`` (or ``(B, P, V)``) logits exist; with a teacher top-K cache
the teacher is not run at all.
"""

from __future__ import annotations

from typing import Sequence

import torch

from trainer.algos.distill import topk_support_index
from trainer.distill.aligned import aligned_hidden
from trainer.logprobs.chunked_logprobs import chunked_gather_logprobs, chunked_topk_logprobs

__all__ = ["DEFAULT_LOGPROB_CHUNK", "teacher_topk_logprobs", "distill_logprobs"]


DEFAULT_LOGPROB_CHUNK = 1024  # positions per LM-head chunk when model.logprob_chunk is 0


def _rows_to_batch(x: torch.Tensor, mask: torch.Tensor, fill=0) -> torch.Tensor:
    """``(N, S)`` rows in row-major order of ``mask (B, P)``'s ones -> ``(B, P, S)`` (``fill`` elsewhere)."""
    out = torch.full((*mask.shape, x.shape[-1]), fill, dtype=x.dtype, device=x.device)
    return out.masked_scatter(mask.bool().unsqueeze(-1), x)


def _topk(hidden, weight, k: int, *, temperature: float, chunk: int):
    if hidden.shape[0] == 0:
        dtype = torch.float64 if hidden.dtype == torch.float64 else torch.float32
        return (torch.zeros(0, k, dtype=dtype, device=hidden.device),
                torch.zeros(0, k, dtype=torch.long, device=hidden.device))
    return chunked_topk_logprobs(hidden, weight, k, temperature=temperature, chunk=chunk)


def _gather(hidden, weight, index, *, temperature: float, chunk: int) -> torch.Tensor:
    return chunked_gather_logprobs(hidden, weight, index.long(), temperature=temperature, chunk=chunk)[0]


def _choice_logprobs(choice, weight, choice_ids: Sequence[int], *, temperature: float, chunk: int) -> torch.Tensor:
    """``(B, C)`` log-probs of ``choice_ids`` from the choice positions' hidden states ``choice (B, H)``."""
    index = torch.tensor([list(choice_ids)] * choice.shape[0], device=choice.device)
    return _gather(choice, weight, index, temperature=temperature, chunk=chunk)


@torch.no_grad()
def teacher_topk_logprobs(model, prompts, completions, positions, *, pad_id, device, choice_ids: Sequence[int],
                          k: int, temperature: float, chunk: int, index: torch.Tensor | None = None) -> dict:
    """The teacher's side of :func:`distill_logprobs` (no grad): at every position of ``positions`` (see
    :func:`aligned_hidden`) its top-``k`` tokens' log-probs and ids, ``values, indices (N, k)`` (``k = 0``:
    none), with ``index (N, K')`` also its log-probs at those tokens, ``at_index (N, K')``, and ``choice (B, C)``:
    its log-probs of ``choice_ids`` at the choice position. All log-probs are full-vocabulary
    ``log softmax(logits / temperature)``, computed ``chunk`` positions at a time (no ``(N, V)`` tensor)."""
    tokens, choice, weight, mask = aligned_hidden(model, prompts, completions, positions, pad_id, device)
    kw = dict(temperature=temperature, chunk=chunk)
    out = {"mask": mask, "vocab": weight.shape[0]}
    if k:
        out["values"], out["indices"] = _topk(tokens, weight, min(k, weight.shape[0]), **kw)
    if index is not None:
        out["at_index"] = _gather(tokens, weight, index, **kw)
    out["choice"] = _choice_logprobs(choice, weight, choice_ids, **kw)
    return out


def distill_logprobs(student, teacher, student_prompts, teacher_prompts, completions, positions, *, pad_id, device,
                     choice_ids: Sequence[int], k: int, support: str, temperature: float = 1.0,
                     chunk: int = DEFAULT_LOGPROB_CHUNK, teacher_cached: dict | None = None) -> dict:
    """Teacher and student on their own prompts, aligned by completion position, reduced to what the KL needs.

    ``student``: the model being trained (gradients flow); ``teacher``: a zero-argument callable returning a
    context manager that yields the teacher model under no-grad (``DistillSteps.teacher_model``);
    ``positions[b]``: the reasoning positions of row b (strictly increasing, ``< len(completions[b])``); the
    choice position ``len(completions[b])`` is added. ``support`` (``algo.topk_support``): whose top-``k``
    tokens the token KL covers (``trainer/algos/distill.py:topk_support_index``). ``teacher_cached``
    (support ``teacher`` only; the teacher top-K cache): ``values, indices (N, k)`` and ``choice (B, C)`` of the
    teacher at these positions, in place of its forward.

    Returns (log-probs at ``temperature``, i.e. ``log softmax(logits / T)`` over the full vocabulary):
    ``teacher, student (B, P, S)`` on the support, ``valid (B, P, S)`` (False: a union duplicate or
    padding), ``mask (B, P)``, ``teacher_choice, student_choice (B, C)`` at the choice position, ``vocab``.
    ``gathered_forward_kl(teacher, student, valid, mask, vocab=vocab)`` is then ``topk_forward_kl`` of the two
    models' logits; ``choice_kl(T * teacher_choice, T * student_choice, temperature=T)`` is ``choice_kl`` of
    their choice logits (``softmax`` over ``{log p_A, log p_B}`` equals ``softmax`` over ``{z_A / T, z_B / T}``).

    Memory: no ``(B, T, V)`` or ``(N, V)`` logits of either model exist, only ``chunk x V`` at a time. Order:
    with the teacher's support, the teacher runs first and is reduced to ``(N, k)`` before the student's
    forward; the student's or the union's support needs the student's top-K first, so the student's hidden
    states (kept anyway for its backward) are alive while the teacher runs and is reduced.
    """
    if teacher_cached is not None and support != "teacher":
        raise ValueError(f"a cached teacher top-K is the support only with support='teacher'; got {support!r}")
    kw = dict(temperature=temperature, chunk=chunk)
    args = (completions, positions)
    side = dict(pad_id=pad_id, device=device, choice_ids=choice_ids, temperature=temperature, chunk=chunk)
    if support == "teacher":
        if teacher_cached is not None:
            t = teacher_cached
        else:
            with teacher() as m:
                t = teacher_topk_logprobs(m, teacher_prompts, *args, k=k, **side)
        tokens, choice, weight, mask = aligned_hidden(student, student_prompts, *args, pad_id, device)
        index, valid = topk_support_index(t["indices"].to(tokens.device).long(), None, support)
        logp_t = t["values"].to(tokens.device)
    else:
        tokens, choice, weight, mask = aligned_hidden(student, student_prompts, *args, pad_id, device)
        with torch.no_grad():
            s_idx = _topk(tokens.detach(), weight, min(k, weight.shape[0]), **kw)[1]
        with teacher() as m:
            t = teacher_topk_logprobs(m, teacher_prompts, *args, k=k if support == "union" else 0, index=s_idx,
                                      **side)
        if support == "student":
            index, valid, logp_t = *topk_support_index(None, s_idx, support), t["at_index"]
        else:
            index, valid = topk_support_index(t["indices"], s_idx, support)
            logp_t = torch.cat([t["values"], t["at_index"]], dim=-1)
    logp_s = _gather(tokens, weight, index, **kw)
    choice_s = _choice_logprobs(choice, weight, choice_ids, **kw)
    return {"teacher": _rows_to_batch(logp_t.to(mask.device), mask), "student": _rows_to_batch(logp_s, mask),
            "valid": _rows_to_batch(valid.to(mask.device), mask, fill=False), "mask": mask,
            "teacher_choice": t["choice"].to(choice_s.device), "student_choice": choice_s, "vocab": weight.shape[0]}
