"""Shared-prompt preference batches: a pair's prompt is run once for its chosen and its rejected answer.

Each pair becomes one packed row ``prompt + chosen + rejected`` (right-padded). A block attention mask
lets the chosen tokens see the prompt and earlier chosen tokens, and the rejected tokens see the prompt
and earlier rejected tokens (never the chosen ones); position ids restart at the prompt length for the
rejected segment. Every token then has exactly the context and position it has in the two-sequence
batch of ``trainer.logprobs.logprobs.build_preference_batch``, so the log-probs agree within float round-off
(tests/trainer/logprobs/test_shared_prompt.py: 1e-5 in fp32 for the loss, the metrics and the LoRA gradients).

The first rejected token is predicted from the last prompt position, like the first chosen one; a
target's predicting position is therefore gathered (``pred_index``) rather than taken as ``t - 1``.
The mask is a 4D float mask (0 = attend, dtype-min = blocked), which transformers passes as-is to the
SDPA and eager attention kernels; padding positions attend to themselves only (no NaN rows).

Public API:

- ``pack_preference_batch(batch: PairBatch) -> SharedPromptBatch`` (from the ``[chosen; rejected]``
  two-sequence batch, so tokenisation and truncation rules stay in one place)
- ``shared_prompt_logprobs(model, batch, *, temperature=1.0, logprob_chunk=0) -> (2n,)`` summed
  completion log-probs in the layout ``[chosen_0..chosen_{n-1}, rejected_0..rejected_{n-1}]``
- ``SharedPromptBatch.token_fraction_saved``: 1 - packed tokens / two-sequence tokens (no padding)
- ``block_attention_mask(segments, dtype)``, ``packed_forward(model, batch, *, start, hidden)``,
  ``attention_takes_4d_mask(attn_implementation)``: the pieces GRPO's group packing
  (``trainer.logprobs.group_packing``) shares with this module
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from trainer.logprobs.logprobs import right_pad

__all__ = ["SharedPromptBatch", "attention_takes_4d_mask", "block_attention_mask", "pack_preference_batch",
           "packed_forward", "shared_prompt_logprobs"]

PROMPT, CHOSEN, REJECTED, PAD = 0, 1, 2, -1


@dataclass
class SharedPromptBatch:
    """Packed ``prompt + chosen + rejected`` rows, ``(n, L)`` long each, right-padded.

    ``segments``: 0 prompt, 1 chosen, 2 rejected, -1 padding. ``position_ids``: restart at the prompt
    length for the rejected segment. ``pred_index[b, t]``: the column whose output predicts token ``t``
    (meaningful where ``segments`` is 1 or 2). ``pair_tokens``: token count of the two-sequence rows."""

    input_ids: Any
    segments: Any
    position_ids: Any
    pred_index: Any
    pair_tokens: int

    def to(self, device) -> SharedPromptBatch:
        return SharedPromptBatch(self.input_ids.to(device), self.segments.to(device), self.position_ids.to(device),
                                 self.pred_index.to(device), self.pair_tokens)

    @property
    def num_tokens(self) -> int:
        return int((self.segments >= 0).sum())

    @property
    def token_fraction_saved(self) -> float:
        return 1.0 - self.num_tokens / self.pair_tokens

    def attention_mask_4d(self, dtype):
        """``(n, 1, L, L)`` additive mask: 0 where query ``i`` may attend key ``j``, ``finfo(dtype).min`` elsewhere."""
        return block_attention_mask(self.segments, dtype)


def block_attention_mask(segments, dtype):
    """``(n, 1, L, L)`` additive mask of packed rows whose ``segments (n, L)`` are 0 for a shared prefix,
    k >= 1 for the k-th sequence packed after it and -1 for padding: query ``i`` may attend key ``j <= i``
    when ``j`` is in the prefix or in ``i``'s own segment (0 there, ``finfo(dtype).min`` elsewhere);
    padding positions attend to themselves only (no NaN rows)."""
    import torch  # deferred: imports torch

    seg = segments
    L = seg.shape[1]
    causal = torch.ones(L, L, dtype=torch.bool, device=seg.device).tril()
    q, k = seg.unsqueeze(2), seg.unsqueeze(1)
    allowed = causal & (k >= 0) & ((k == PROMPT) | (k == q))
    allowed = allowed | torch.eye(L, dtype=torch.bool, device=seg.device)  # padding rows: themselves only
    mask = torch.zeros(allowed.shape, dtype=dtype, device=seg.device)
    return mask.masked_fill_(~allowed, torch.finfo(dtype).min).unsqueeze(1)


def attention_takes_4d_mask(attn_implementation) -> bool:
    """Whether ``model.attn_implementation`` applies a 4D block mask as given (SDPA, eager; None = the
    transformers default, SDPA). Flash-attention kernels ignore it, so packing is exact only on these."""
    return attn_implementation in (None, "sdpa", "eager")


def pack_preference_batch(batch) -> SharedPromptBatch:
    """Pack a ``build_preference_batch`` result (rows ``[chosen; rejected]``) into one row per pair."""


    n2 = batch.input_ids.shape[0]
    if n2 % 2:
        raise ValueError(f"a preference batch has chosen and rejected rows; got {n2} rows")
    n = n2 // 2
    rows, segs, pos, pred = [], [], [], []
    for i in range(n):
        pc, pr = batch.prompt_lengths[i], batch.prompt_lengths[n + i]
        lc, lr = batch.completion_lengths[i], batch.completion_lengths[n + i]
        prompt = batch.input_ids[i, :pc].tolist()
        if pc != pr or prompt != batch.input_ids[n + i, :pr].tolist():
            raise ValueError(f"pair {i}: chosen and rejected rows have different prompts")
        chosen = batch.input_ids[i, pc:pc + lc].tolist()
        rejected = batch.input_ids[n + i, pr:pr + lr].tolist()
        rows.append(prompt + chosen + rejected)
        segs.append([PROMPT] * pc + [CHOSEN] * lc + [REJECTED] * lr)
        pos.append(list(range(pc + lc)) + list(range(pc, pc + lr)))
        # chosen token t is predicted by column t - 1; the first rejected one by the last prompt column
        pred.append([0] * pc + list(range(pc - 1, pc + lc - 1)) + [pc - 1] + list(range(pc + lc, pc + lc + lr - 1)))
    ids, _, _ = right_pad(rows, rows, 0)  # a padding column's id only reaches its own (unused) output
    _, _, seg = right_pad(rows, [[s + 1 for s in r] for r in segs], 0)
    _, _, position_ids = right_pad(rows, pos, 0)
    _, _, pred_index = right_pad(rows, pred, 0)
    return SharedPromptBatch(ids, seg - 1, position_ids, pred_index, int(batch.attention_mask.sum()))


def packed_forward(model, batch, *, start: int, hidden: bool):
    """Run the packed rows once (``batch``: any packed batch with ``input_ids``, ``position_ids`` and
    ``attention_mask_4d(dtype)``, e.g. a ``SharedPromptBatch`` or ``trainer.logprobs.group_packing.PackedGroups``).
    ``hidden``: the decoder's final hidden states ``(n, L, H)`` and the LM head (the chunked path); else logits
    of columns ``start..L-1``."""
    dtype = next(model.parameters()).dtype
    kwargs = dict(input_ids=batch.input_ids, attention_mask=batch.attention_mask_4d(dtype),
                  position_ids=batch.position_ids, use_cache=False)
    if not hidden:
        return model(**kwargs, logits_to_keep=batch.input_ids.shape[1] - start).logits, None
    from trainer.logprobs.chunked_logprobs import lm_head_of  # deferred: imports torch

    decoder, head = lm_head_of(model)
    captured = []
    handle = decoder.register_forward_hook(
        lambda _m, _a, out: captured.append(out[0] if isinstance(out, tuple) else out.last_hidden_state))
    try:
        model(**kwargs, logits_to_keep=1)
    finally:
        handle.remove()
    return captured[0], head


def shared_prompt_logprobs(model, batch: SharedPromptBatch, *, temperature: float = 1.0, logprob_chunk: int = 0):
    """Summed completion log-probs ``(2n,)``: chosen rows first, then rejected (``build_preference_batch``'s
    layout). ``logprob_chunk > 0``: the head is applied that many positions at a time
    (``trainer.logprobs.chunked_logprobs``), never building ``(n, L, V)`` logits."""
    import torch  # deferred: imports torch

    seg = batch.segments
    target = seg > 0
    n = seg.shape[0]
    if not logprob_chunk:
        start = int(batch.pred_index[target].min()) if bool(target.any()) else 0
        logits = packed_forward(model, batch, start=start, hidden=False)[0]
        dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
        rows = torch.arange(n, device=seg.device).unsqueeze(1).expand_as(seg)[target]
        cols = batch.pred_index[target] - start
        x = logits[rows, cols].to(dtype)  # (N, V): the predicting column of each target token
        if temperature != 1.0:
            x = x / temperature
        lp = x.gather(-1, batch.input_ids[target].unsqueeze(-1)).squeeze(-1) - torch.logsumexp(x, dim=-1)
        token_lp = torch.zeros(seg.shape, dtype=lp.dtype, device=lp.device).masked_scatter(target, lp)
    else:
        from trainer.logprobs.chunked_logprobs import chunked_token_logprobs

        hidden, head = packed_forward(model, batch, start=0, hidden=True)
        rows = torch.arange(n, device=seg.device).unsqueeze(1).expand_as(seg)
        h = hidden[rows[target], batch.pred_index[target]]
        lp, _ = chunked_token_logprobs(h, head.weight, batch.input_ids[target], temperature=temperature,
                                       chunk=logprob_chunk)
        token_lp = torch.zeros(seg.shape, dtype=lp.dtype, device=lp.device).masked_scatter(target, lp)
    chosen = (token_lp * (seg == CHOSEN)).sum(1)
    rejected = (token_lp * (seg == REJECTED)).sum(1)
    return torch.cat([chosen, rejected])
