"""Policy, reference model, optimizer and LR schedule shared by every trainer.

Reference model: with LoRA the reference is the *same* model with its adapter disabled
(``peft``'s ``disable_adapter()`` context), so no second copy of the weights exists. For full
fine-tuning a frozen copy is built once. Either way callers use :class:`Reference`.
"""

from __future__ import annotations

import contextlib
import copy
import math
from typing import Callable

import torch


def build_policy(model_cfg, *, seed: int):
    """Load the base model and tokenizer; wrap in a LoRA adapter when ``model.lora.enabled``."""
    from eval_hooks.models import load_model, load_tokenizer

    tokenizer = load_tokenizer(model_cfg.path, trust_remote_code=model_cfg.trust_remote_code)
    model = load_model(model_cfg.path, dtype=model_cfg.dtype, trust_remote_code=model_cfg.trust_remote_code,
                       attn_implementation=model_cfg.attn_implementation)
    if model_cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
    if model_cfg.lora.enabled:
        from peft import LoraConfig, get_peft_model

        targets = list(model_cfg.lora.target_modules)
        torch.manual_seed(seed)  # adapter init is part of the run's determinism
        lora = LoraConfig(r=model_cfg.lora.r, lora_alpha=model_cfg.lora.alpha, lora_dropout=model_cfg.lora.dropout,
                          target_modules="all-linear" if targets == ["all-linear"] else targets,
                          task_type="CAUSAL_LM")
        if model_cfg.gradient_checkpointing:
            model.enable_input_require_grads()
        model = get_peft_model(model, lora)
    return model, tokenizer


class Reference:
    """Reference log-probs: ``with ref.context(model) as m: m(...)`` runs the reference forward."""

    def __init__(self, policy, *, lora: bool):
        self.lora = lora
        self.frozen = None
        if not lora:
            self.frozen = copy.deepcopy(policy).eval()
            for p in self.frozen.parameters():
                p.requires_grad_(False)

    @contextlib.contextmanager
    def context(self, policy_unwrapped):
        if self.lora:
            with policy_unwrapped.disable_adapter():
                yield policy_unwrapped
        else:
            yield self.frozen

    def to(self, device):
        if self.frozen is not None:
            self.frozen.to(device)
        return self


def build_optimizer(model, optim_cfg) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("no trainable parameters (is model.lora.target_modules matching any module?)")
    return torch.optim.AdamW(params, lr=optim_cfg.lr, betas=tuple(optim_cfg.betas), eps=optim_cfg.eps,
                             weight_decay=optim_cfg.weight_decay)


def lr_lambda(kind: str, *, max_steps: int, warmup_steps: int) -> Callable[[int], float]:
    """Multiplier of the peak LR at optimizer step ``s`` (0-based): linear warmup, then the decay."""

    def f(s: int) -> float:
        if warmup_steps > 0 and s < warmup_steps:
            return (s + 1) / warmup_steps
        if kind == "constant":
            return 1.0
        progress = (s - warmup_steps) / max(1, max_steps - warmup_steps)
        progress = min(max(progress, 0.0), 1.0)
        if kind == "linear":
            return 1.0 - progress
        return 0.5 * (1.0 + math.cos(math.pi * progress))

    return f


def build_scheduler(optimizer, optim_cfg, *, max_steps: int):
    warmup = int(round(optim_cfg.warmup_ratio * max_steps))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda(optim_cfg.scheduler, max_steps=max_steps,
                                                                  warmup_steps=warmup))
