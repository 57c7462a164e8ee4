"""The distillation trainer's logit-based evaluation (docs/taste.md#distillation-trainer): a model writes its
reasoning for every view, then answers by the larger choice logit; taste metrics, calibration error and
per-view log-odds."""

from __future__ import annotations

from typing import Any, Sequence

import torch

from trainer.distill.aligned import aligned_logits
from trainer.distill.calibration import expected_calibration_error
from trainer.distill.generation import generate_reasoning
from trainer.distill.views import ForkView, choice_token_ids
from eval_hooks.families import get_family
from eval_hooks import compute_metrics
from selectrust.generation.prompts import render_prompt

__all__ = ["choice_logits_after", "evaluate_views", "eval_settings"]


@torch.no_grad()
def choice_logits_after(model, tokenizer, prompts, reasonings, *, answer_ids: list[int], choice_ids: list[int],
                        device) -> torch.Tensor:
    """``(B, 2)`` logits of the choice tokens at the choice position after ``reasoning + answer prefix``."""
    completions = [list(r) + answer_ids for r in reasonings]
    logits, _ = aligned_logits(model, prompts, completions, [[len(c)] for c in completions],
                               tokenizer.pad_token_id, device)
    return logits[:, 0, choice_ids].float()


def evaluate_views(model, tokenizer, views: Sequence[ForkView], *, teacher: bool, settings, gen: dict,
                   answer_ids: list[int], choice_ids: list[int], temperature: float, batch_size: int,
                   seed: int, device) -> dict[str, Any]:
    """The model writes its reasoning (greedy) for every view, then answers by the larger choice logit.

    Returns the taste metrics (``strict``, ``mean``, per cell/domain, ...) plus ``ece`` of the choice
    probability ``softmax(z / temperature)`` (confidence = probability of the chosen letter, 10 bins),
    ``well_formed`` (fraction of reasoning blocks that ended properly) and per-view ``log_odds``
    (log p(A) - log p(B), for advice)."""
    family = get_family("taste")
    scores, conf, correct, log_odds, formed = [], [], [], {}, 0
    for start in range(0, len(views), batch_size):
        chunk = views[start:start + batch_size]
        prompts = [render_prompt(tokenizer, v.teacher_prompt if teacher else v.student_prompt, settings)
                   for v in chunk]
        reasoning = generate_reasoning(model, tokenizer, prompts, temperature=0.0, seed=seed, device=device, **gen)
        formed += sum(ok for _, ok in reasoning)
        z = choice_logits_after(model, tokenizer, prompts, [r for r, _ in reasoning], answer_ids=answer_ids,
                                choice_ids=choice_ids, device=device)
        probs = torch.softmax(z / temperature, dim=-1)
        for v, zi, pi in zip(chunk, z, probs):
            letter = "A" if zi[0] >= zi[1] else "B"
            scores.append(family.score_row(v.row, f"ANSWER: {letter}"))
            conf.append(float(pi.max()))
            correct.append(letter == v.gold)
            log_odds[v.view_id] = float(zi[0] - zi[1])
    metrics = compute_metrics("taste", scores)
    metrics["ece"] = expected_calibration_error(conf, correct)
    metrics["well_formed"] = formed / max(1, len(views))
    metrics["log_odds"] = log_odds
    return metrics


def eval_settings(tokenizer, algo) -> dict[str, Any]:
    """The keyword arguments of :func:`evaluate_views` that come from the ``algo`` config node."""
    return dict(gen=dict(max_new_tokens=algo.max_reasoning_tokens, end=algo.reasoning_end),
                answer_ids=list(tokenizer(algo.answer_prefix, add_special_tokens=False)["input_ids"]),
                choice_ids=choice_token_ids(tokenizer, algo.choice_tokens), temperature=algo.calibration_temperature)
