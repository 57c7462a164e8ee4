"""Generate with a live LoRA policy's adapters merged, without touching its weights.

A peft LoRA ``Linear`` runs its base layer and then ``dropout -> A -> B -> scale -> add`` at every forward. In
decoding, where each step is one token per row, those extra small matmuls and their Python overhead cost about
9% of a step of SmolLM2-135M with LoRA on the attention projections (one thread, 4-52 rows; profiled for issue
43). :func:`lora_merged` swaps each such layer's weight for a temporary ``W + scale * B @ A`` and switches the
layer's adapter off for the duration of a ``with`` block, then puts the *same* weight tensor back.

How it departs from peft's ``merge_adapter()``/``unmerge_adapter()``: those add the delta into the weight and
subtract it again, so each cycle leaves the frozen base weight off by float round-off (GRPO would drift its base
a little at every rollout). Here the original tensor is never written: the merged weight is a new tensor and the
original ``Parameter`` object is restored, bit for bit. The merged layer computes ``x @ (W + dW)^T`` where the
adapter computes ``x @ W^T + (x @ A^T) @ B^T * scale``: the same function up to float rounding (about 1e-7
relative in fp32), so greedy tokens may differ where two logits tie within rounding.

Only plain LoRA ``Linear`` layers are merged (no DoRA or other variant, no LoRA bias, every active adapter a LoRA
one, a materialised weight: never a DeepSpeed ZeRO-3 shard); any other adapter layer keeps running as it is.

Public API: ``lora_merged(model) -> context manager yielding the number of layers merged``.
"""

from __future__ import annotations

import contextlib

__all__ = ["lora_merged"]


def _mergeable(module, lora_linear: type) -> bool:
    """A plain peft LoRA ``Linear`` (``lora_linear``) with adapters to merge (see the module docstring)."""
    if not isinstance(module, lora_linear) or module.merged or module.disable_adapters:
        return False
    active = [a for a in module.active_adapters if a in module.lora_A]
    if not active:
        return False
    if any(module.use_dora.get(a, False) or module.lora_bias.get(a, False) for a in active):
        return False
    if any(getattr(module, "lora_variant", {}).get(a) is not None for a in active):
        return False
    weight = getattr(module.get_base_layer(), "weight", None)
    return weight is not None and weight.numel() > 0 and not hasattr(weight, "ds_id")


@contextlib.contextmanager
def lora_merged(model):
    """Within the block, every mergeable LoRA layer of ``model`` (:func:`_mergeable`) runs one matmul with a
    temporary merged weight and its adapter switched off; on exit (also on an error) each layer gets back its own
    weight ``Parameter`` and adapter state. Meant for inference under ``torch.no_grad`` (the merged weight needs no
    grad; lora dropout is not applied, as in ``eval()`` mode). Yields how many layers were merged."""
    import torch  # deferred: imports torch

    try:
        from peft.tuners.lora.layer import Linear as LoraLinear
    except ImportError:  # no peft: nothing to merge
        yield 0
        return
    swapped = []
    try:
        with torch.no_grad():
            for module in model.modules():
                if not _mergeable(module, LoraLinear):
                    continue
                base = module.get_base_layer()
                weight = base.weight
                delta = sum(module.get_delta_weight(a) for a in module.active_adapters if a in module.lora_A)
                merged = torch.nn.Parameter(weight.detach() + delta.to(weight.dtype), requires_grad=False)
                swapped.append((module, base, weight, module._disable_adapters))
                base.weight = merged
                module._disable_adapters = True
        yield len(swapped)
    finally:
        for module, base, weight, disabled in reversed(swapped):
            base.weight = weight
            module._disable_adapters = disabled
