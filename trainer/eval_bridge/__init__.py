"""Epoch-end matched evaluation for every trainer, through ``eval_hooks`` (the same code the CLI uses).

``load_eval_rows`` runs before any model loads, so a broken evaluation file fails the run at start-up
rather than after the first epoch. The generation backend comes from the ``generation`` config through the
backend registry (:mod:`trainer.eval_bridge.backend`: ``make_backend``, ``build_inference_backend``,
``generation_capabilities``, ``server_errors``): in-process over the live policy, a server of the run's model, or
a server with a model of its own (``openai_chat``), which evaluates that model, not the policy.

With a backend that can take the trainer's adapter (capability ``weight_sync``: ``generation=vllm_server``) the
epoch-end evaluation of every trainer goes through the server, on the *current* weights: before each evaluation
the LoRA adapter is saved, loaded on the server under a new name and probed
(:class:`trainer.eval_bridge.weight_sync.AdapterSync`, own client with adapter prefix ``eval`` and own directory
``<adapter root>/eval``, so a GRPO run's rollout adapters are never unloaded by it). The version, checksum and
probe difference go to ``eval/<epoch>/adapter_sync.json`` and the logged eval metrics. A policy without a LoRA
adapter cannot be pushed to the server and is refused at start-up, never evaluated on the server's base weights;
so is a server of the run's model that cannot take an adapter at all.

``weight_sync`` (the adapter sync and its probe) lives in this package because it serves this evaluation for
every trainer; GRPO's rollouts use it too (``trainer/rl/rollout_sync.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from selectrust.generation.prompts import PromptSettings
from trainer.eval_bridge.backend import (build_inference_backend, generation_capabilities, make_backend,  # noqa: F401
                                        server_errors)
from eval_hooks.families import FAMILIES, get_family
from selectrust.core.errors import ConfigError
from eval_hooks import run_matched_eval
from eval_hooks.families import get_family


def load_eval_rows(eval_cfg) -> list[dict] | None:
    """The rows of the ``eval`` group (the family's :meth:`~eval_hooks.families.base.Family.eval_rows` under its
    own settings, e.g. Taste's prompt cap or a raw MedEvidence file for Med), ``eval.max_rows`` whole items of
    them, and their knowledge labels (``eval.knowledge_path``, for a family with ``knowledge_labels``)."""
    if not eval_cfg.enabled or not eval_cfg.path:
        return None

    from trainer.data.train_data import keep_whole_items, resolve_data_path  # deferred: imports numpy

    family = get_family(eval_cfg.family)
    if eval_cfg.knowledge_path and not family.knowledge_labels:
        able = " | ".join(n for n in FAMILIES if get_family(n).knowledge_labels)  # broken plugins left out
        raise ConfigError(f"eval.knowledge_path splits the metrics by knowledge labels, which family {family.name}'s "
                          f"metrics do not (families whose metrics do: {able}); eval.family={eval_cfg.family}")
    rows = family.eval_rows(resolve_data_path(eval_cfg.path), family.settings_from(eval_cfg))
    rows = keep_whole_items(rows, eval_cfg.max_rows)
    if eval_cfg.knowledge_path:  # metrics per knowledge label (docs/scope.md#knowledge-aware-scope)
        from eval_hooks.knowledge import attach_knowledge

        rows = attach_knowledge(rows, resolve_data_path(eval_cfg.knowledge_path))
    return rows


def run_eval(backend, rows: list[dict], eval_cfg, out_dir, *, step: int | None = None, progress: bool = True) -> dict:
    """The evaluated family's run on ``rows`` (generation, scoring, metrics, report; written to ``out_dir``):
    the same for ``recipes/evaluate.py`` and the epoch ends, under the family's own settings (``Family.settings_from``:
    e.g. ``eval.med``). ``eval.max_new_tokens`` None = the family's default budget for ``rows`` (:func:`eval_budget`)."""
    return run_matched_eval(backend, rows, eval_cfg.family, out_dir, step=step,
                            max_new_tokens=eval_budget(eval_cfg, rows), progress=progress,
                            settings=get_family(eval_cfg.family).settings_from(eval_cfg))


def eval_budget(eval_cfg, rows: list[dict]) -> int:
    """The generation budget per row of an evaluation: ``eval.max_new_tokens`` when set, else the family's
    default for ``rows`` (``Family.budget``; e.g. MIST short_text rows: 32)."""
    return get_family(eval_cfg.family).budget(rows, eval_cfg.max_new_tokens)


def make_epoch_eval(ctx, rows: list[dict] | None, backend_factory: Callable[[], Any], *, policy=None,
                    tokenizer=None) -> Callable | None:
    """The callable the loop runs at epoch ends: writes ``<run_dir>/eval/epoch_<e>/`` and returns metrics.

    ``backend_factory()`` gives the backend of an in-process generation (or of a server with a model of its own).
    With a backend that takes the adapter (``weight_sync``), ``policy`` (the unwrapped peft model) and
    ``tokenizer`` are required: the adapter is pushed to the server and probed before every evaluation (module
    docstring); a failed push or probe raises (``AdapterLoadError`` / ``StaleWeightsError``), it never evaluates
    other weights.
    """
    if rows is None:
        return None
    ecfg, gen = ctx.cfg.eval, ctx.cfg.generation
    caps = generation_capabilities(gen)
    if caps.policy_model and not (caps.in_process or caps.weight_sync):
        from selectrust.core.errors import ConfigError
        from selectrust.generation.backends import backends_that

        raise ConfigError(f"generation={gen.backend} cannot take the trained adapter (this server kind loads no "
                          "adapters): its epoch-end evaluation would be of the base weights. Use a backend that "
                          f"evaluates the current weights ({backends_that('in_process', 'weight_sync')}), or "
                          "eval.enabled=false")
    server_sync = _server_sync(ctx, policy, tokenizer) if caps.weight_sync else None

    def on_epoch_end(epoch, step: int) -> dict:
        out = Path(ctx.run_dir) / "eval" / (f"epoch_{epoch}" if isinstance(epoch, int) else str(epoch))
        sync_info = None
        if server_sync is not None:
            sync = server_sync()
            sync_info = sync.sync(policy, step)  # save + load + probe, or raise: never stale or base weights
            backend = sync.backend
        else:
            backend = backend_factory()
        result = run_eval(backend, rows, ecfg, out, step=step, progress=ctx.cfg.trainer.progress)
        if sync_info is not None:
            from selectrust.core.io import write_json_atomic

            info = {**sync_info, "served_adapter": sync.backend.current_adapter, "step": step}
            write_json_atomic(out / "adapter_sync.json", info)
            result = {**result, "adapter_sync": {k: v for k, v in info.items() if isinstance(v, (int, float))}}
        return result

    return on_epoch_end


def _server_sync(ctx, policy, tokenizer):
    """The lazy :class:`~trainer.eval_bridge.weight_sync.AdapterSync` of the epoch-end evaluation through a server
    (own client with adapter prefix ``eval``, own directory ``<adapter root>/eval``); refuses, before training,
    a run whose adapter could not be pushed."""
    from trainer.eval_bridge.weight_sync import (  # deferred: import cycle with trainer.eval_bridge.weight_sync
        adapter_root, lazy_adapter_sync)

    gen = ctx.cfg.generation
    if policy is None or tokenizer is None:
        raise ConfigError(f"generation={gen.backend} evaluation needs the policy and tokenizer (make_epoch_eval("
                          "..., policy=, tokenizer=)) to push the current adapter to the server")
    if not hasattr(policy, "peft_config"):
        raise ConfigError(f"generation={gen.backend}: epoch-end evaluation through the server needs a LoRA policy "
                          "(model.lora.enabled=true), because only an adapter can be pushed to a running server; "
                          "with full fine-tuning the server would evaluate its base weights. Use generation=hf.")
    return lazy_adapter_sync(
        lambda: make_backend(gen, policy, tokenizer, model_path=ctx.cfg.model.path,
                             prompt_settings=PromptSettings.from_config(ctx.cfg.prompt), adapter_prefix="eval"),
        adapter_root(ctx) / "eval", every_k_steps=1, keep_last=1, tokenizer=tokenizer,
        probe_threshold=gen.probe_threshold, main_process=True)
