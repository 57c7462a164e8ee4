"""Shared-prompt GRPO (``algo.shared_prompt``): a group's prompt is run once for its G samples.

The consecutive rows of a rollout micro-batch that share their prompt (a group, or the part of a group
in this micro-batch) become one packed row ``prefix + rest_1 + ... + rest_m`` (right-padded). The block
attention mask of ``trainer.logprobs.shared_prompt.block_attention_mask`` lets every token of ``rest_k`` see
the prefix and the earlier tokens of ``rest_k`` only, and position ids restart at the prefix length for
every ``rest_k``; so each token has exactly the context and position it has in its own row of the
unshared batch, and the log-probs agree with ``trainer.logprobs.logprobs.sequence_logprobs`` within float
round-off (tests/trainer/rl/test_grpo_shared_prompt.py: loss, per-token log-probs and LoRA gradients within 1e-5
in fp32, G in {2, 4, 8}, ragged, empty and budget-length completions, the chunked head).

Why one packed row per group rather than the prompt's KV cache expanded to the G rows:

- the LoRA gradient must flow through the prompt's tokens too (the prompt's keys and values depend on
  the adapter); in a packed row the prompt is an ordinary part of the one forward graph, so autograd
  sums the G completions' contributions to it, with no cache plumbing (a ``past_key_values`` with
  gradients, expanded with ``repeat_interleave``, is model- and transformers-version-specific);
- the 4D-mask path of transformers (SDPA and eager) is the one DPO's packing already relies on and
  tests (tests/trainer/logprobs/test_shared_prompt.py); flash-attention kernels ignore a 4D mask, so
  ``algo.shared_prompt`` applies only under SDPA or eager (``attention_takes_4d_mask``);
- the chunked LM-head path (``model.logprob_chunk``) works unchanged on the packed hidden states.
  The price: attention over a packed row is ``L^2`` with ``L = prompt + sum of completions`` (the mask
  blocks the cross-completion pairs, SDPA still visits them); for GRPO's short completions the saved
  prompt tokens (MLP and projections, which dominate) are worth far more.

Which rows share: a row's *prompt* is its tokens before its first target (``completion_mask`` 1); for a
multi-turn episode that is the first turn. A row joins the run of the row before it when the two agree on
their prompts; the run's shared prefix is the longest prefix its rows all share, never past a row's first
target (a row without targets, e.g. a truncated completion under ``algo.mask_truncated``, joins on its
prompt too). Rows that do not match run on their own (still exact, only unshared);
``group_fallbacks`` reports the groups where that happens, for the log line of ``trainer.rl.rollout``.

Public API:

- ``shared_prefix_runs(rows, masks) -> [(first, end, prefix_len)]``: the runs of a batch (python lists)
- ``packed_token_counts(rows, masks) -> (packed, unshared)``: tokens the forward runs, with and without
- ``group_fallbacks(rows, masks, item_ids) -> [item_id]``: groups whose rows do not all share one run
- ``report_unshared_groups(rows, masks, item_ids) -> int``: logs those groups (a warning), returns their count
- ``pack_groups(input_ids, attention_mask, completion_mask) -> PackedGroups``
- ``group_sequence_logprobs(model, input_ids, attention_mask, completion_mask, *, temperature=1.0,
  return_entropy=False, logprob_chunk=0)``: ``sequence_logprobs``' outputs ``(seq (B,), token (B, T),
  entropy (B, T) | None)`` from the packed forward
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

from trainer.logprobs.shared_prompt import PROMPT, block_attention_mask, packed_forward
from trainer.logprobs.logprobs import right_pad
from trainer.logprobs.logprobs import token_entropy, token_logprobs

__all__ = ["PackedGroups", "group_fallbacks", "group_sequence_logprobs", "pack_groups", "packed_token_counts",
           "report_unshared_groups", "shared_prefix_runs"]

logger = logging.getLogger(__name__)


def _prompt_len(mask: Sequence[int]) -> int:
    """Index of the first target (the prompt's length), or the row's length when it has none."""
    return next((t for t, m in enumerate(mask) if m), len(mask))


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    return next((t for t in range(n) if a[t] != b[t]), n)


def shared_prefix_runs(rows: Sequence[Sequence[int]], masks: Sequence[Sequence[int]]) -> list[tuple[int, int, int]]:
    """Runs ``(first, end, prefix_len)`` of consecutive rows that share a prefix (see the module
    docstring): rows ``first..end-1`` all start with the same ``prefix_len >= 1`` tokens and no row has a
    target before ``prefix_len``. ``rows[i]``: the unpadded token ids of row ``i``; ``masks[i]``: its 0/1
    targets, as long as the row. Every row is in exactly one run, in order."""
    runs: list[tuple[int, int, int]] = []
    i = 0
    while i < len(rows):
        head_p = _prompt_len(masks[i])
        if head_p < 1:
            raise ValueError(f"row {i}: a target at column 0 has no context to be predicted from")
        prefix, j = head_p, i + 1
        while j < len(rows):
            p_j = _prompt_len(masks[j])
            need = min(head_p, p_j)
            common = _common_prefix(rows[i], rows[j])
            if need < 1 or common < need:
                break
            prefix = min(prefix, common, p_j)
            j += 1
        runs.append((i, j, prefix))
        i = j
    return runs


def packed_token_counts(rows: Sequence[Sequence[int]], masks: Sequence[Sequence[int]]) -> tuple[int, int]:
    """``(packed, unshared)``: tokens the packed forward runs (each run's prefix once) and the unshared one
    runs (every row whole), padding excluded."""
    packed = sum(p + sum(len(rows[k]) - p for k in range(a, b)) for a, b, p in shared_prefix_runs(rows, masks))
    return packed, sum(len(r) for r in rows)


def group_fallbacks(rows: Sequence[Sequence[int]], masks: Sequence[Sequence[int]],
                    item_ids: Sequence[str]) -> list[str]:
    """The item ids whose consecutive rows (a group) are split over more than one run: their samples
    differ before their first target (e.g. a multi-turn episode whose first turn renders differently),
    so some of them run unshared."""
    out: list[str] = []
    runs = shared_prefix_runs(rows, masks)
    run_of = [r for r, (a, b, _) in enumerate(runs) for _ in range(a, b)]
    for k in range(1, len(rows)):
        if item_ids[k] == item_ids[k - 1] and run_of[k] != run_of[k - 1] and item_ids[k] not in out:
            out.append(item_ids[k])
    return out


def report_unshared_groups(rows: Sequence[Sequence[int]], masks: Sequence[Sequence[int]],
                           item_ids: Sequence[str]) -> int:
    """Log a warning naming the groups of one micro-batch that :func:`group_fallbacks` finds (their samples
    run unshared: exact, only slower); returns their count. ``masks``: the completion masks as trained."""
    items = group_fallbacks(rows, masks, item_ids)
    if items:
        logger.warning("algo.shared_prompt: the samples of %d group(s) differ before their first target (the "
                       "first turn), so they run unshared: %s", len(items), ", ".join(items[:8]))
    return len(items)


@dataclass
class PackedGroups:
    """Packed rows ``(n, L)`` long (``input_ids``, ``segments``: 0 prefix, k the k-th row of the run, -1
    padding; ``position_ids``) and where the unshared batch's targets are: target ``i`` (in the row-major
    order of ``completion_mask``) is token ``labels[i]``, predicted by packed row ``row[i]``, column
    ``col[i]``. ``shape``: the unshared batch's ``(B, T)``; ``unshared_tokens``: its real tokens."""

    input_ids: Any
    segments: Any
    position_ids: Any
    row: Any
    col: Any
    labels: Any
    shape: tuple[int, int]
    unshared_tokens: int

    def attention_mask_4d(self, dtype):
        return block_attention_mask(self.segments, dtype)

    @property
    def num_tokens(self) -> int:
        return int((self.segments >= 0).sum())

    @property
    def token_fraction_saved(self) -> float:
        return 1.0 - self.num_tokens / max(self.unshared_tokens, 1)


def pack_groups(input_ids, attention_mask, completion_mask) -> PackedGroups:
    """Pack a right-padded rollout micro-batch (``(B, T)`` long each, as ``sequence_logprobs`` takes it)
    into one row per run of :func:`shared_prefix_runs`."""
    import torch  # deferred: imports torch


    if input_ids.shape != attention_mask.shape or input_ids.shape != completion_mask.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)}, attention_mask {tuple(attention_mask.shape)} and "
                         f"completion_mask {tuple(completion_mask.shape)} must all be (B, T)")
    lengths = attention_mask.long().sum(1).tolist()
    if any(int(attention_mask[b, :n].sum()) != n for b, n in enumerate(lengths)):
        raise ValueError("algo.shared_prompt packs right-padded rows; this batch has padding before a real token")
    if bool((completion_mask.bool() & ~attention_mask.bool()).any()):
        raise ValueError("completion_mask marks padding positions (attention_mask == 0)")
    ids_l, cm_l = input_ids.tolist(), completion_mask.long().tolist()
    rows = [ids_l[b][:n] for b, n in enumerate(lengths)]
    masks = [cm_l[b][:n] for b, n in enumerate(lengths)]
    packed, segs, pos = [], [], []
    t_row, t_col, t_lab = [], [], []
    for r, (a, b, p) in enumerate(shared_prefix_runs(rows, masks)):
        tokens, seg, position = list(rows[a][:p]), [PROMPT] * p, list(range(p))
        for k in range(a, b):
            offset = len(tokens)  # packed column of the row's token p

            def col(t: int, offset: int = offset) -> int:
                return t if t < p else offset + t - p

            tokens += rows[k][p:]
            seg += [k - a + 1] * (len(rows[k]) - p)
            position += list(range(p, len(rows[k])))
            for t, m in enumerate(masks[k]):
                if m:
                    t_row.append(r)
                    t_col.append(col(t - 1))
                    t_lab.append(rows[k][t])
        packed.append(tokens)
        segs.append(seg)
        pos.append(position)
    ids, _, _ = right_pad(packed, packed, 0)  # a padding column's id only reaches its own (unused) output
    _, _, seg_t = right_pad(packed, [[s + 1 for s in row] for row in segs], 0)
    _, _, pos_t = right_pad(packed, pos, 0)
    dev = input_ids.device
    as_long = lambda x: torch.tensor(x, dtype=torch.long, device=dev)  # noqa: E731
    return PackedGroups(ids.to(dev), (seg_t - 1).to(dev), pos_t.to(dev), as_long(t_row), as_long(t_col),
                        as_long(t_lab), tuple(input_ids.shape), sum(lengths))


def group_sequence_logprobs(model, input_ids, attention_mask, completion_mask, *, temperature: float = 1.0,
                            return_entropy: bool = False, logprob_chunk: int = 0):
    """``sequence_logprobs``' outputs from one forward over the packed groups: ``seq_logps (B,)``,
    ``token_logps (B, T)`` aligned with ``input_ids`` (zero outside the completion) and ``entropy (B, T)``
    (detached) or None. ``logprob_chunk > 0``: the LM head ``chunk`` positions at a time
    (``trainer.logprobs.chunked_logprobs``). A drop-in for ``sequence_logprobs`` on right-padded rows."""
    import torch  # deferred: imports torch


    if bool(completion_mask[:, :1].bool().any()):
        raise ValueError("completion_mask marks column 0: the first token has no context to be predicted from")
    pk = pack_groups(input_ids, attention_mask, completion_mask)
    comp = completion_mask.bool()
    entropy = None
    if logprob_chunk:
        from trainer.logprobs.chunked_logprobs import chunked_token_logprobs

        hidden, head = packed_forward(model, pk, start=0, hidden=True)
        lp, ent = chunked_token_logprobs(hidden[pk.row, pk.col], head.weight, pk.labels, temperature=temperature,
                                         chunk=logprob_chunk, return_entropy=return_entropy)
    else:
        start = int(pk.col.min()) if pk.col.numel() else pk.input_ids.shape[1] - 1
        logits = packed_forward(model, pk, start=start, hidden=False)[0]
        x = logits[pk.row, pk.col - start].unsqueeze(0)  # (1, N, V): the predicting column of each target
        lp = token_logprobs(x, pk.labels.unsqueeze(0), temperature=temperature)[0]
        ent = token_entropy(x, temperature=temperature)[0] if return_entropy else None
    token_logps = torch.zeros(comp.shape, dtype=lp.dtype, device=lp.device).masked_scatter(comp, lp)
    if return_entropy:
        entropy = torch.zeros(comp.shape, dtype=ent.dtype, device=ent.device).masked_scatter(comp, ent)
    return token_logps.sum(dim=1), token_logps, entropy
