"""The trainer's side of the generation-backend registry (``selectrust.generation.backends``): the backend of a
``generation`` config node, what it can do, and what a run stops on when it fails.

Nothing here knows a backend by name. :func:`make_backend` hands the node's settings to the backend's factory;
:func:`build_inference_backend` (stand-alone recipes: evaluate, mine_pairs) loads what the backend's capabilities
say it needs (nothing for a server with a model of its own, the tokenizer for a server of ``model.path``, the
model too for an in-process backend); :func:`generation_capabilities` is what validation, GRPO and the epoch-end
evaluation ask.
"""

from __future__ import annotations

from pathlib import Path

from selectrust.generation.backends import BuildContext, Capabilities, capabilities, get_backend
from selectrust.generation.prompts import PromptSettings
from selectrust.model import load_policy_for_inference, load_tokenizer
from selectrust.model import resolve_mixed_precision


def generation_capabilities(gen_cfg) -> Capabilities:
    """What the backend of ``gen_cfg`` can do: its capabilities, or those of the flavour its settings declare
    (``generation.server_kind=llama_cpp``: a text-only completions server)."""
    return capabilities(gen_cfg.backend, gen_cfg)


def make_backend(gen_cfg, model, tokenizer, *, model_path: str, prompt_settings: PromptSettings | None = None,
                 adapter_prefix: str = "policy"):
    """The generation backend of ``generation.backend``, built by its registered factory from the node's settings:
    over ``model`` (the live policy, in-process) and ``tokenizer``; it renders prompts under ``prompt_settings``
    (the ``prompt`` group), as training does. ``adapter_prefix``: served names of the adapters a server loads."""
    ctx = BuildContext(model=model, tokenizer=tokenizer, model_path=model_path, prompt_settings=prompt_settings,
                       adapter_prefix=adapter_prefix)
    return get_backend(gen_cfg.backend).build(gen_cfg, ctx)


def server_errors(gen_cfg) -> tuple[type[BaseException], ...]:
    """Exceptions after which ``train_loop`` checkpoints before stopping (``checkpoint_on=``): the backend's own
    (a server's: dead, malformed reply, refused adapter) and, where the adapter is synced to it, a failed sync
    probe; none for an in-process backend."""
    errors = get_backend(gen_cfg.backend).errors
    if generation_capabilities(gen_cfg).weight_sync:
        from trainer.eval_bridge.weight_sync import StaleWeightsError

        errors = (*errors, StaleWeightsError)
    return errors


def build_inference_backend(model_cfg, gen_cfg, *, prompt_settings: PromptSettings | None = None,
                            adapter_path: str | None = None):
    """Backend for a stand-alone (non-training) recipe: the model of ``model_cfg`` (on CUDA when present),
    optionally with a LoRA adapter, in-process or behind a server, rendering prompts under ``prompt_settings``.
    A ``model.init_adapter`` (``init_adapter_mode=merge``) is merged into the base first, as the trainers do.
    A backend with a model of its own (a chat endpoint) loads nothing here."""
    caps = generation_capabilities(gen_cfg)
    if not caps.policy_model:  # nothing loads here: the server holds the model
        return make_backend(gen_cfg, None, None, model_path=model_cfg.path, prompt_settings=prompt_settings)

    tokenizer = load_tokenizer(model_cfg.path, trust_remote_code=model_cfg.trust_remote_code)
    model = load_policy_for_inference(model_cfg, adapter_path, merge_adapter=generates_in_fp32(model_cfg, gen_cfg)
                                      ) if caps.in_process else None
    backend = make_backend(gen_cfg, model, tokenizer, model_path=model_cfg.path, prompt_settings=prompt_settings)
    if adapter_path and not caps.in_process:
        backend.load_adapter(str(Path(adapter_path).resolve()), "eval")
    return backend


def generates_in_fp32(model_cfg, gen_cfg) -> bool:
    """Whether an in-process backend of ``gen_cfg`` computes in fp32: fp32 weights (``model.dtype``) and no autocast
    (``generation.mixed_precision`` resolved on this machine: ``auto`` is fp32 on a CPU without AMX-BF16)."""
    import torch  # deferred: imports torch


    mp = resolve_mixed_precision(getattr(gen_cfg, "mixed_precision", "no"), cpu=not torch.cuda.is_available(),
                                 quiet=True)
    return str(model_cfg.dtype) == "float32" and mp == "no"
