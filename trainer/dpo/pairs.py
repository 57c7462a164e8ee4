"""A micro-batch of preference pairs, as the DPO recipe (``recipes/dpo.py``) trains on it: its collation (the
two-sequence batch of ``trainer.logprobs.logprobs.build_preference_batch``, chosen rows then rejected, and, where it
is exact, the packed shared-prompt rows of ``trainer.logprobs.shared_prompt``), its summed completion log-probs, and
the reference table precomputed over every pair (``algo.reference=precomputed``).

A micro-batch is a dict: ``batch`` (``PairBatch``, ``2n`` rows), ``weights`` ``(n,)``, ``conditions`` and
``item_ids`` (``n`` each), ``indices`` (the pairs' rows in the training data) and, with the shared prompt,
``packed`` (``SharedPromptBatch``, ``n`` rows).
"""

from __future__ import annotations

import torch
from trainer.logprobs.shared_prompt import attention_takes_4d_mask
from trainer.logprobs.logprobs import build_preference_batch
from trainer.logprobs.shared_prompt import pack_preference_batch
from trainer.logprobs.shared_prompt import shared_prompt_logprobs


def use_shared_prompt(cfg) -> bool:
    """``data.shared_prompt`` where it is exact: the DPO loss (not ``algo.sft_on_chosen``) under an attention
    kernel that takes a 4D mask (SDPA or eager; flash-attention kernels ignore it). ``cfg``: a DPO run's typed
    settings (``DPORunConfig``)."""
    return (bool(cfg.data.shared_prompt) and not cfg.algo.sft_on_chosen
            and attention_takes_4d_mask(cfg.model.attn_implementation))


def collate_pairs(rows: list[dict], tokenizer, batch_kwargs: dict, indices: list[int], weights: list[float], *,
                  shared_prompt: bool) -> dict:
    """The micro-batch of pairs ``rows[indices]``: the two-sequence ``batch`` (chosen rows, then rejected) and,
    with ``shared_prompt`` (``data.shared_prompt``), ``packed``: one prompt+chosen+rejected row per pair
    (trainer/logprobs/shared_prompt.py), which the DPO step runs instead."""
    picked = [rows[i] for i in indices]
    batch = build_preference_batch(tokenizer, [r["prompt"] for r in picked], [r["chosen"] for r in picked],
                                   [r["rejected"] for r in picked], **batch_kwargs,
                                   chosen_cut=[r.get("chosen_finish") == "length" for r in picked],
                                   rejected_cut=[r.get("rejected_finish") == "length" for r in picked])
    mb = {"batch": batch, "weights": torch.tensor(weights), "conditions": [r["pool"] for r in picked],
          "item_ids": [r["item_id"] for r in picked], "indices": indices}
    if shared_prompt:
        mb["packed"] = pack_preference_batch(batch)
    return mb


def pair_logps(model, mb: dict, device, logprobs) -> torch.Tensor:
    """Summed completion log-probs ``(2n,)`` (chosen, then rejected) of a micro-batch: from its packed rows
    when it has them, else from the two-sequence batch (``logprobs``: ``sequence_logprobs`` with the run's
    settings, whose ``logprob_chunk`` the packed path uses too)."""
    if "packed" in mb:
        chunk = getattr(logprobs, "keywords", {}).get("logprob_chunk", 0)
        return shared_prompt_logprobs(model, mb["packed"].to(device), logprob_chunk=chunk)
    b = mb["batch"].to(device)
    return logprobs(model, b.input_ids, b.attention_mask, b.completion_mask)[0]


def reference_table(reference, policy, collate, n: int, batch_size: int, device, *, logprobs) -> torch.Tensor:
    """``(n, 2)`` reference log-probs (chosen, rejected) of every pair, computed once with no grad
    (``logprobs``: ``trainer.logprobs.logprobs.sequence_logprobs`` with the run's settings)."""
    table = torch.zeros(n, 2)
    with torch.no_grad(), reference.context(policy) as ref_model:
        for start in range(0, n, batch_size):
            idx = list(range(start, min(start + batch_size, n)))
            ref = pair_logps(ref_model, collate(idx, [1.0] * len(idx)), device, logprobs)
            table[idx] = torch.stack(ref.float().cpu().chunk(2), dim=1)
    return table
