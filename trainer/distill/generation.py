"""Reasoning written by a model (the teacher's samples in stage 1, every model's greedy reasoning in evaluation),
cut after ``algo.reasoning_end``."""

from __future__ import annotations

from typing import Sequence

import torch

from trainer.distill.aligned import build_batch

__all__ = ["truncate_at", "generate_reasoning"]


def truncate_at(tokenizer, ids: list[int], end: str) -> tuple[list[int], bool]:
    """``ids`` up to and including the token whose decoding first completes ``end``; (ids, found)."""
    text = ""
    for i in range(len(ids)):
        text = tokenizer.decode(ids[:i + 1], skip_special_tokens=False)
        if end in text:
            return ids[:i + 1], True
    return list(ids), False


@torch.no_grad()
def generate_reasoning(model, tokenizer, prompts: Sequence[list[int]], *, max_new_tokens: int, temperature: float,
                       end: str, seed: int, device) -> list[tuple[list[int], bool]]:
    """Reasoning of each prompt (greedy when ``temperature`` is 0), cut after ``end``: ``[(ids, well_formed)]``.
    Sampling is seeded with ``seed`` inside a forked RNG (the training stream is untouched)."""
    batch = build_batch(prompts, [[] for _ in prompts], tokenizer.pad_token_id)
    was_training = model.training
    model.eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        kw = dict(do_sample=True, temperature=temperature, top_k=0, top_p=1.0) if temperature > 0 else \
            dict(do_sample=False)
        out = model.generate(input_ids=batch["input_ids"].to(device), attention_mask=batch["attention_mask"].to(device),
                             max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                             eos_token_id=tokenizer.eos_token_id, **kw)
    if was_training:
        model.train()
    lp = batch["input_ids"].shape[1]
    results = []
    for row in out[:, lp:].tolist():
        if tokenizer.eos_token_id in row:
            row = row[:row.index(tokenizer.eos_token_id)]
        results.append(truncate_at(tokenizer, row, end))
    return results
