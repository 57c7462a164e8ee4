"""Shared helpers for the vLLM-worker tests (reference server, tiny LoRA policies)."""

from __future__ import annotations


def make_lora_policy(model_dir, *, seed: int = 0, scale: float = 0.5):
    """A tiny Llama with a LoRA adapter whose B matrices are random (so the adapter changes outputs)."""
    from peft import LoraConfig, get_peft_model

    from selectrust.model import load_model

    model = get_peft_model(load_model(str(model_dir)),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], lora_dropout=0.0))
    perturb_lora(model, seed=seed, scale=scale)
    return model


def perturb_lora(model, *, seed: int, scale: float = 0.5) -> None:
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_" in name:
                p.copy_(torch.randn(p.shape, generator=g) * scale)


def reference_server(model_dir, tokenizer, *, model_name: str = "tiny"):
    """A started in-process ``ReferenceServer`` on the tiny model (call ``.shutdown()`` when done)."""
    from selectrust.generation.backends.reference_server import ReferenceServer
    from selectrust.model import load_model

    return ReferenceServer(load_model(str(model_dir)), tokenizer, model_name=model_name).start()
