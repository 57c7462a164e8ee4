"""Teacher and student aligned by completion position: the batch layout, the positions drawn per view, and the
forward passes that read logits (:func:`aligned_logits`) or final hidden states (:func:`aligned_hidden`) at
completion-relative positions.

Alignment: prompts are left-padded and completions right-padded, so completion token ``j`` sits in column
``Lp + j`` of every row, whatever the prompt's length; teacher and student batches differ only in ``Lp``.
Evaluation and stage 2 read the choice position's logits with :func:`aligned_logits` (``logits_to_keep`` =
the needed columns); stage 1 (``trainer/distill/gathered.py``) projects :func:`aligned_hidden`'s states itself.
"""

from __future__ import annotations

from typing import Sequence

import torch

from selectrust.generation.backends.base import derive_seed

from trainer.logprobs.chunked_logprobs import completion_hidden_states

__all__ = ["sample_positions", "build_batch", "aligned_logits", "aligned_hidden"]


def sample_positions(n: int, max_positions: int, *, seed: int, view_id: str, epoch: int) -> list[int]:
    """At most ``max_positions`` of ``range(n)`` (sorted), drawn without replacement by a generator seeded
    with ``(seed, view_id, epoch)``: a pure function of its arguments, so a resumed run draws the same
    positions with no sampler state to save (<= 0 keeps all)."""
    if max_positions <= 0 or n <= max_positions:
        return list(range(n))
    g = torch.Generator().manual_seed(derive_seed(seed, "positions", view_id, epoch))
    return sorted(torch.randperm(n, generator=g)[:max_positions].tolist())


def build_batch(prompts: Sequence[list[int]], completions: Sequence[list[int]], pad_id: int) -> dict:
    """Left-padded prompts + right-padded completions: ``input_ids, attention_mask, position_ids`` ``(B, Lp + C)``
    and ``prompt_width`` Lp (completion token j of every row is in column Lp + j)."""
    lp = max(len(p) for p in prompts)
    c = max(len(x) for x in completions)
    ids = torch.full((len(prompts), lp + c), pad_id, dtype=torch.long)
    att = torch.zeros_like(ids)
    for i, (p, x) in enumerate(zip(prompts, completions)):
        ids[i, lp - len(p):lp] = torch.tensor(p, dtype=torch.long)
        ids[i, lp:lp + len(x)] = torch.tensor(x, dtype=torch.long)
        att[i, lp - len(p):lp + len(x)] = 1
    pos = (att.cumsum(-1) - 1).clamp_min(0)
    return {"input_ids": ids, "attention_mask": att, "position_ids": pos, "prompt_width": lp}


def aligned_logits(model, prompts: Sequence[list[int]], completions: Sequence[list[int]],
                   positions: Sequence[Sequence[int]], pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits at completion-relative positions, with only those columns through the LM head.

    ``positions[b]``: positions ``j`` in ``[0, len(completions[b])]`` of row b; the logits at ``j`` are the
    distribution of completion token j (``j = len(completion)`` is the choice position). Returns
    ``(logits (B, P, V), mask (B, P))`` with ``P = max_b len(positions[b])`` (padding entries masked).
    Both teacher and student call this with their own prompts and the same completions and positions,
    so entry ``[b, p]`` of the two results is the same completion position."""
    batch = build_batch(prompts, completions, pad_id)
    lp = batch["prompt_width"]
    cols = sorted({lp - 1 + j for ps in positions for j in ps})
    index = {c: i for i, c in enumerate(cols)}
    width = max(len(ps) for ps in positions)
    gather = torch.zeros(len(positions), width, dtype=torch.long)
    mask = torch.zeros(len(positions), width)
    for b, ps in enumerate(positions):
        for p, j in enumerate(ps):
            gather[b, p] = index[lp - 1 + j]
            mask[b, p] = 1.0
    out = model(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device),
                position_ids=batch["position_ids"].to(device), logits_to_keep=torch.tensor(cols, device=device),
                use_cache=False)
    logits = out.logits  # (B, len(cols), V)
    picked = logits.gather(1, gather.to(device).unsqueeze(-1).expand(-1, -1, logits.shape[-1]))
    return picked, mask.to(device)


def aligned_hidden(model, prompts: Sequence[list[int]], completions: Sequence[list[int]],
                   positions: Sequence[Sequence[int]], pad_id: int, device):
    """Final hidden states at completion-relative positions and at the choice position, no logits.

    ``positions[b]``: strictly increasing positions ``j`` in ``[0, len(completions[b]))`` of row b (the hidden
    state at ``j`` gives the distribution of completion token j); the choice position ``len(completions[b])``
    is always added. Returns ``(tokens (N, H), choice (B, H), head_weight (V, H), mask (B, P))``: ``tokens`` in
    row-major order of ``mask``'s ones (``N = sum_b len(positions[b])``, ``P = max_b len(positions[b])``).
    The batch layout is :func:`build_batch`'s plus one padding column (so the longest row's choice
    position exists); the model runs with ``logits_to_keep=1`` (``completion_hidden_states``)."""
    batch = build_batch(prompts, completions, pad_id)
    lp = batch["prompt_width"]
    ids = torch.nn.functional.pad(batch["input_ids"], (0, 1), value=pad_id)
    att = torch.nn.functional.pad(batch["attention_mask"], (0, 1))
    comp = torch.zeros_like(ids)  # comp[b, c] = 1: the hidden state of column c - 1 is kept
    width = max([len(ps) for ps in positions] + [0])
    mask = torch.zeros(len(positions), width)
    for b, (ps, c) in enumerate(zip(positions, completions)):
        ps = list(ps)
        if ps != sorted(set(ps)) or (ps and (ps[0] < 0 or ps[-1] >= len(c))):
            raise ValueError(f"positions[{b}] must be strictly increasing in [0, {len(c)}); got {ps}")
        comp[b, [lp + j for j in ps] + [lp + len(c)]] = 1
        mask[b, :len(ps)] = 1.0
    try:
        hidden, head = completion_hidden_states(model, ids.to(device), att.to(device), comp.to(device))
    except ValueError as e:  # lm_head_of: a head the chunked projection cannot reproduce
        raise ValueError(f"distillation projects hidden states through the LM head itself "
                         f"(trainer/logprobs/chunked_logprobs.py) and needs a plain nn.Linear head without bias or "
                         f"soft-capping (keep lm_head out of model.lora.target_modules): {e}") from e
    counts = torch.tensor([len(ps) + 1 for ps in positions])
    is_choice = torch.zeros(int(counts.sum()), dtype=torch.bool)
    is_choice[counts.cumsum(0) - 1] = True  # each row's choice position is its last (largest) column
    is_choice = is_choice.to(hidden.device)
    return hidden[~is_choice], hidden[is_choice], head.weight, mask.to(hidden.device)
