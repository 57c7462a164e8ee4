"""Completion-only (masked) negative log-likelihood, as a pure tensor function.

Public API (names are stable):

- ``masked_nll_loss(logits_or_logps, labels, mask=None, *, aggregation="token_mean", num_items=None)
  -> (loss, metrics)``
- ``mean_over_nonempty_rows(values, counted) -> ()``: the reduction behind ``aggregation="sequence_mean"``
  here (a row without a counted token is skipped; GRPO's ``sequence_mean`` counts such a row as 0:
  ``trainer.algos.grpo.mean_over_all_rows``)

Alignment convention (shared with ``trainer.logprobs.logprobs``): ``logits[:, t]`` is the distribution of
``labels[:, t]``. For a causal LM over ``input_ids`` pass ``logits[:, :-1]`` and ``input_ids[:, 1:]``,
or the ``(B, T)`` token log-probs from ``sequence_logprobs`` (already aligned with ``input_ids``).
"""

from __future__ import annotations

import torch

from trainer.algos.choices import AGGREGATIONS  # sequence_mean here: mean_over_nonempty_rows

__all__ = ["masked_nll_loss", "mean_over_nonempty_rows", "IGNORE_INDEX"]

IGNORE_INDEX = -100


def mean_over_nonempty_rows(values: torch.Tensor, counted: torch.Tensor) -> torch.Tensor:
    """Each row's mean over its counted positions, then the mean over the rows that have at least one
    counted position: an empty row is skipped (it neither adds to the sum nor to the count). ``values``
    ``(B, T)`` must be 0 where ``counted`` ``(B, T)`` (bool) is not set. 0 when every row is empty."""
    per_row_tokens = counted.sum(dim=1)
    nonempty = per_row_tokens > 0
    per_row = values.sum(dim=1) / per_row_tokens.clamp_min(1).to(values.dtype)
    return (per_row * nonempty).sum() / nonempty.sum().clamp_min(1).to(values.dtype)


def masked_nll_loss(
    logits_or_logps: torch.Tensor,
    labels: torch.Tensor | None,
    mask: torch.Tensor | None = None,
    *,
    aggregation: str = "token_mean",
    num_items: int | float | torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """Negative log-likelihood of the target tokens only (SFT on completions / assistant turns).

    Shapes:
      - ``logits_or_logps``: ``(B, T, V)`` logits aligned with ``labels``, or ``(B, T)`` per-token
        log-probs of the labels (then ``labels`` is only used for ``-100`` masking and may be None).
      - ``labels``: ``(B, T)`` token ids; ``-100`` marks an ignored position (TRL/HF convention).
      - ``mask``: ``(B, T)`` 0/1 or bool; a position counts iff ``mask`` is set AND label != -100.
        At least one of ``labels`` / ``mask`` must be given.

    Aggregation:
      - ``"token_mean"``: ``sum of NLL over counted tokens / N`` with ``N = num_items`` if given,
        else the number of counted tokens in this batch. This is TRL 1.16 ``SFTTrainer``'s loss
        (``completion_only_loss`` / ``assistant_only_loss`` just set labels to -100): summed
        ``-log p`` divided by ``num_items_in_batch``; pass ``num_items`` = the token count of the
        whole accumulation window to reproduce it under gradient accumulation.
      - ``"sequence_mean"``: per-sequence mean NLL, then the mean over sequences that have at least
        one counted token (:func:`mean_over_nonempty_rows`; ``num_items`` is ignored). Not in TRL; gives
        every example equal weight.

    Returns ``(loss, metrics)``; metrics: ``num_tokens`` (counted tokens), ``nll_token_mean``
    (per-token NLL regardless of aggregation), ``num_empty_sequences`` (rows with no counted token).
    """
    if aggregation not in AGGREGATIONS:
        raise ValueError(f"aggregation must be one of {AGGREGATIONS}; got {aggregation!r}")
    if labels is None and mask is None:
        raise ValueError("masked_nll_loss needs labels (with -100 for ignored positions) or an explicit mask")

    if logits_or_logps.dim() == 3:
        if labels is None:
            raise ValueError("(B, T, V) logits need labels to pick the target token")
        if logits_or_logps.shape[:2] != labels.shape:
            raise ValueError(f"logits {tuple(logits_or_logps.shape)} and labels {tuple(labels.shape)} are not aligned; "
                             "pass logits[:, :-1] with labels = input_ids[:, 1:]")
        safe = labels.clamp_min(0)
        logits = logits_or_logps.float() if logits_or_logps.dtype in (torch.float16, torch.bfloat16) else logits_or_logps
        token_logps = logits.gather(-1, safe.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    elif logits_or_logps.dim() == 2:
        token_logps = logits_or_logps
    else:
        raise ValueError(f"expected (B, T, V) logits or (B, T) log-probs; got shape {tuple(logits_or_logps.shape)}")

    counted = torch.ones_like(token_logps, dtype=torch.bool)
    if labels is not None:
        if labels.shape != token_logps.shape:
            raise ValueError(f"labels {tuple(labels.shape)} must match log-probs {tuple(token_logps.shape)}")
        counted &= labels != IGNORE_INDEX
    if mask is not None:
        if mask.shape != token_logps.shape:
            raise ValueError(f"mask {tuple(mask.shape)} must match log-probs {tuple(token_logps.shape)}")
        counted &= mask.bool()

    # where(), not multiply: an ignored position may hold -inf or garbage and must not poison the sum.
    nll = torch.where(counted, -token_logps, torch.zeros_like(token_logps))
    per_row_tokens = counted.sum(dim=1)
    total_tokens = per_row_tokens.sum()

    if aggregation == "token_mean":
        denom = total_tokens if num_items is None else torch.as_tensor(num_items, device=nll.device)
        loss = nll.sum() / denom.to(nll.dtype).clamp_min(1.0)
    else:
        loss = mean_over_nonempty_rows(nll, counted)

    metrics = {
        "num_tokens": total_tokens.detach(),
        "nll_token_mean": (nll.detach().sum() / total_tokens.clamp_min(1)),
        "num_empty_sequences": (per_row_tokens == 0).sum().detach(),
    }
    return loss, metrics
