"""The training policy and its reference, shared by every trainer; merged models and saved adapters.

:func:`load_policy` is the one call that gives a trainer its model: the base model (:func:`selectrust.model.load.
load_model`), an optional starting adapter, and a fresh LoRA adapter when ``model.lora.enabled``. The optimizer and
LR schedule are the trainer's (``trainer/runtime/optim.py``).

Reference model: with LoRA the reference is the *same* model with its adapter disabled
(``peft``'s ``disable_adapter()`` context), so no second copy of the weights exists. For full
fine-tuning a frozen copy is built once. Either way callers use :class:`Reference`.

Starting from an adapter (``model.init_adapter``, e.g. the previous stage's ``final/``):

- ``model.init_adapter_mode=merge`` (default): the adapter is folded into the base weights in memory,
  then a fresh LoRA is added (or all weights train). The reference is the merged model (the adapter
  disabled, or the frozen copy), i.e. the policy the run started from.
- ``continue``: the loaded adapter itself keeps training (``default``), and a frozen copy of it is
  loaded as a second named adapter (``reference``), so the reference is again the starting policy.

Either way the first step's policy equals its reference: KL 0, DPO reward margins 0.
"""

from __future__ import annotations

import contextlib
import copy
from pathlib import Path

from .adapter import check_adapter_dir, check_adapter_finite
from .settings import ModelConfig
import json
import os
import shutil
import tempfile

TRAINED_ADAPTER = "default"      # peft's name for the adapter a run trains
REFERENCE_ADAPTER = "reference"  # the frozen copy of model.init_adapter (init_adapter_mode=continue)


def load_base_with_adapters(model_cfg: ModelConfig, adapters: list[str], *, device: str | None = None):
    """The base model of ``model_cfg`` (a ``ModelConfig``: path, dtype, trust_remote_code, attn_implementation) with
    each adapter directory in ``adapters`` merged into its weights, in order (each checked for safetensors weights
    and finite values first)."""
    # looked up at call time: a test can refuse every load at selectrust.model.load
    from .load import load_model  # deferred: tests patch it

    model = load_model(model_cfg.path, dtype=model_cfg.dtype, trust_remote_code=model_cfg.trust_remote_code,
                       attn_implementation=model_cfg.attn_implementation, device=device)
    for adapter in adapters:
        from peft import PeftModel

        adapter_dir = check_adapter_dir(adapter, "adapter")
        check_adapter_finite(adapter_dir, "adapter")
        model = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    return model


def _add_lora(model, model_cfg: ModelConfig, *, seed: int):
    """``model`` wrapped in a fresh LoRA adapter of ``model_cfg.lora`` (initialised under ``seed``)."""
    import torch  # deferred: imports torch
    from peft import LoraConfig, get_peft_model  # deferred: imports torch, peft

    targets = list(model_cfg.lora.target_modules)
    torch.manual_seed(seed)  # adapter init is part of the run's determinism
    lora = LoraConfig(r=model_cfg.lora.r, lora_alpha=model_cfg.lora.alpha, lora_dropout=model_cfg.lora.dropout,
                      target_modules="all-linear" if targets == ["all-linear"] else targets,
                      task_type="CAUSAL_LM")
    return get_peft_model(model, lora)


def load_policy(model_cfg: ModelConfig, *, seed: int):
    """``(model, tokenizer)`` of a training run: load the base model and tokenizer; start from
    ``model.init_adapter`` (merged, or continued with a frozen ``reference`` copy); wrap in a fresh LoRA adapter
    when ``model.lora.enabled`` (not when continuing)."""
    from .load import load_tokenizer  # deferred: import cycle with selectrust.model.load

    tokenizer = load_tokenizer(model_cfg.path, trust_remote_code=model_cfg.trust_remote_code)
    init, mode = model_cfg.init_adapter, model_cfg.init_adapter_mode
    model = load_base_with_adapters(model_cfg, [init] if init and mode == "merge" else [])
    if model_cfg.gradient_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        model.config.use_cache = False
        if model_cfg.lora.enabled:
            model.enable_input_require_grads()
    if init and mode == "continue":
        from peft import PeftModel

        adapter = str(check_adapter_dir(init))
        check_adapter_finite(adapter, "model.init_adapter")
        model = PeftModel.from_pretrained(model, adapter, adapter_name=TRAINED_ADAPTER, is_trainable=True)
        model.load_adapter(adapter, adapter_name=REFERENCE_ADAPTER, is_trainable=False)
        model.set_adapter(TRAINED_ADAPTER)
    elif model_cfg.lora.enabled:
        model = _add_lora(model, model_cfg, seed=seed)
    return model, tokenizer


def export_merged(model_cfg: ModelConfig, adapters: list[str], out_dir) -> Path:
    """Write ``model_cfg.path`` with ``adapters`` merged (in order) as a model directory: safetensors weights,
    config, tokenizer and ``merge_info.json``; built in a temporary sibling, then renamed into place."""
    from .load import load_tokenizer  # deferred: import cycle with selectrust.model.load

    out = Path(out_dir).expanduser().resolve()
    if out.exists():
        raise FileExistsError(f"out_dir={str(out)!r} exists; merge writes a new directory (remove it or pick another)")
    out.parent.mkdir(parents=True, exist_ok=True)
    model = load_base_with_adapters(model_cfg, adapters)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        model.save_pretrained(str(tmp), safe_serialization=True)
        load_tokenizer(model_cfg.path, trust_remote_code=model_cfg.trust_remote_code).save_pretrained(str(tmp))
        info = {"base": model_cfg.path, "dtype": model_cfg.dtype,
                "adapters": [str(check_adapter_dir(a, "adapters")) for a in adapters]}
        (tmp / "merge_info.json").write_text(json.dumps(info, indent=2) + "\n")
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def load_policy_for_inference(model_cfg: ModelConfig, adapter_path: str | None, *, merge_adapter: bool = False):
    """``model.path`` with a merged ``model.init_adapter`` (``init_adapter_mode=merge``) and, on top, the LoRA adapter
    at ``adapter_path`` (checked first), on CUDA when present: merged into the weights with ``merge_adapter`` (an fp32
    model generating in fp32: the caller knows its generation settings), else kept apart as a peft adapter.

    Why both: under bf16 (autocast or bf16 weights) rounding W + BA would lose part of a small LoRA delta, so the
    adapter stays apart and the backend lets autocast cache its casts of the frozen weights
    (``selectrust.generation.backends.hf._casts_cached``). In fp32 the merge rounds at 1e-7 and saves peft's LoRA layers: 192
    held-out rows of the real demo took 20.5 s against 22.3 s on SmolLM2-135M with its attention-only SCOPE adapter,
    and gave the same 348 of 348 responses over the whole held-out set."""
    import torch  # deferred: imports torch

    merged = [model_cfg.init_adapter] if model_cfg.init_adapter and model_cfg.init_adapter_mode == "merge" else []
    model = load_base_with_adapters(model_cfg, merged, device="cuda" if torch.cuda.is_available() else "cpu")
    if adapter_path:
        from peft import PeftModel

        check_adapter_finite(adapter_path, "adapter_path")
        model = PeftModel.from_pretrained(model, adapter_path)
        if merge_adapter:
            model = model.merge_and_unload()
    return model


def save_policy(model, out_dir) -> None:
    """``save_pretrained`` (safetensors) of the trained weights only: the trained adapter (never the frozen
    ``reference`` copy) or, without LoRA, the full model."""
    if hasattr(model, "peft_config"):
        model.save_pretrained(str(out_dir), safe_serialization=True, selected_adapters=[TRAINED_ADAPTER])
    else:
        model.save_pretrained(str(out_dir), safe_serialization=True)


class Reference:
    """Reference log-probs: ``with ref.context(model) as m: m(...)`` runs the reference forward."""

    def __init__(self, policy, *, lora: bool):
        self.lora = lora
        # init_adapter_mode=continue: the reference is the frozen copy of the loaded adapter, not the bare base
        self.named = lora and REFERENCE_ADAPTER in getattr(policy, "peft_config", {})
        self.frozen = None
        if not lora:
            self.frozen = copy.deepcopy(policy).eval()
            for p in self.frozen.parameters():
                p.requires_grad_(False)

    @contextlib.contextmanager
    def context(self, policy_unwrapped):
        if self.named:
            # peft's set_adapter also flips requires_grad; restore it exactly (the trained adapter stays trainable)
            flags = [(p, p.requires_grad) for p in policy_unwrapped.parameters()]
            policy_unwrapped.set_adapter(REFERENCE_ADAPTER)
            try:
                yield policy_unwrapped
            finally:
                policy_unwrapped.set_adapter(TRAINED_ADAPTER)
                for p, flag in flags:
                    p.requires_grad_(flag)
        elif self.lora:
            with policy_unwrapped.disable_adapter():
                yield policy_unwrapped
        else:
            yield self.frozen

    def to(self, device):
        if self.frozen is not None:
            self.frozen.to(device)
        return self
