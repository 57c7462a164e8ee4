"""A ready DistillSteps on the tiny model and a few toy fork views (tests/trainer/distill/test_distill.py, test_distill_gathered.py)."""

from __future__ import annotations

from typing import Callable

import torch

from eval_hooks.builders.taste_toy import make_taste_toy
from selectrust.core.io import write_jsonl_atomic


def make_steps(tmp_path, overrides: list[str], reasoning_len: Callable[[int], int] = lambda i: 2 + i % 5):
    """``(steps, model, views)``: ``recipe=taste_tiny`` on the tiny model (top-7, 3 positions per view, plus
    ``overrides``), a random non-zero LoRA (so teacher = adapter off and student differ), and views of two toy
    tasks whose reasoning is ``reasoning_len(i)`` random tokens (default 2..6: ragged rows)."""
    from selectrust.generation.prompts import PromptSettings
    from recipe_utils import compose
    from trainer.distill.views import choice_token_ids, load_fork_views
    from trainer.distill.steps import DistillSteps
    from selectrust.model import Reference, load_policy

    path = tmp_path / "items.jsonl"
    write_jsonl_atomic(path, make_taste_toy(0, n_tasks=2).items)
    cfg = compose("distill", ["recipe=taste_tiny", "model.path=tiny", "algo.topk=7", "algo.max_positions=3",
                              *overrides])
    views = load_fork_views(path, style="compact", demonstration="")
    model, tok = load_policy(cfg.model, seed=0)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.normal_(0, 0.5)
    g = torch.Generator().manual_seed(1)
    for i, v in enumerate(views):
        v.reasoning = torch.randint(40, 120, (reasoning_len(i),), generator=g).tolist()
    steps = DistillSteps(cfg, model=model, tokenizer=tok, prompt=PromptSettings.from_config(cfg.prompt),
                         reference=Reference(model, lora=True), answer_ids=tok("ANSWER: ")["input_ids"],
                         choice_ids=choice_token_ids(tok, ["A", "B"]), device="cpu")
    return steps, model, views
