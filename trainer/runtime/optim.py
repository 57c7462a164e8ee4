"""The optimizer and LR schedule shared by every trainer (the model comes from :func:`selectrust.model.load_policy`)."""

from __future__ import annotations

from typing import Callable

import torch

from trainer.runtime.lr_decay import decay


def build_optimizer(model, optim_cfg) -> torch.optim.Optimizer:
    """AdamW over the parameters of ``model`` that require grad, with ``optim_cfg``'s lr, betas, eps and decay."""
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("no trainable parameters (is model.lora.target_modules matching any module?)")
    return torch.optim.AdamW(params, lr=optim_cfg.lr, betas=tuple(optim_cfg.betas), eps=optim_cfg.eps,
                             weight_decay=optim_cfg.weight_decay)


def lr_lambda(kind: str, *, max_steps: int, warmup_steps: int) -> Callable[[int], float]:
    """Multiplier of the peak LR at optimizer step ``s`` (0-based): linear warmup, then the decay ``kind``
    (:data:`trainer.runtime.lr_decay.DECAYS`; ValueError for another name).

    Departs from ``transformers.get_scheduler`` in one place only: warm-up step ``s`` runs at ``(s + 1) / warmup``
    (the first step already moves the weights) where transformers starts at LR 0. The decay after warm-up is the
    same formula. It stays hand-written because switching shifts every run's first steps and with them every
    measured number in ``docs/`` (the demo tables, the knowledge-aware and Taste seed tables); adopting the
    library schedule means re-measuring those first (``tests/trainer/runtime/test_lr_schedule.py`` pins both facts)."""

    after = decay(kind)  # optim.scheduler, looked up in trainer/runtime/lr_decay.py's DECAYS

    def f(s: int) -> float:
        if warmup_steps > 0 and s < warmup_steps:
            return (s + 1) / warmup_steps
        progress = (s - warmup_steps) / max(1, max_steps - warmup_steps)
        return after(min(max(progress, 0.0), 1.0))

    return f


def build_scheduler(optimizer, optim_cfg, *, max_steps: int):
    """A ``LambdaLR`` of :func:`lr_lambda` (``optim_cfg.scheduler``, warm-up ``warmup_ratio * max_steps`` steps)."""
    warmup = int(round(optim_cfg.warmup_ratio * max_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(optim_cfg.scheduler, max_steps=max_steps,
                                                                  warmup_steps=warmup))
