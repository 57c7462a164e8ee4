"""Epoch-end matched evaluation for every trainer, through ``eval_hooks`` (the same code the CLI uses).

``load_eval_rows`` runs before any model loads, so a broken evaluation file fails the run at start-up
rather than after the first epoch. ``make_backend`` builds the generation backend named by the
``generation`` config: in-process HF over the live policy, the vLLM server client, or (``openai_chat``)
the client of a chat endpoint, which evaluates the model that server serves, not the policy.

With ``generation=vllm_server`` the epoch-end evaluation of every trainer goes through the server, on the
*current* weights: before each evaluation the LoRA adapter is saved, loaded on the server under a new
name and probed (``trainer.rl.weight_sync.AdapterSync``, own client with adapter prefix ``eval`` and own
directory ``<adapter root>/eval``, so a GRPO run's rollout adapters are never unloaded by it). The
version, checksum and probe difference go to ``eval/<epoch>/adapter_sync.json`` and the logged eval
metrics. A policy without a LoRA adapter cannot be pushed to the server and is refused at start-up,
never evaluated on the server's base weights.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from eval_hooks.prompts import PromptSettings


def load_eval_rows(eval_cfg) -> list[dict] | None:
    """The rows of the ``eval`` group (the family's :meth:`~eval_hooks.families.base.Family.eval_rows`, which
    reads its own settings, e.g. Taste's prompt cap or a raw MedEvidence file for Med), ``eval.max_rows``
    whole items of them, and MIST's knowledge labels (``eval.knowledge_path``)."""
    if not eval_cfg.enabled or not eval_cfg.path:
        return None
    from eval_hooks.families import get_family

    from trainer.config import ConfigError
    from trainer.data.train_data import keep_whole_items, resolve_data_path

    if eval_cfg.knowledge_path and eval_cfg.family != "mist":
        raise ConfigError(f"eval.knowledge_path splits MIST metrics by knowledge; eval.family={eval_cfg.family}")
    rows = get_family(eval_cfg.family).eval_rows(eval_cfg, resolve_data_path(eval_cfg.path))
    rows = keep_whole_items(rows, eval_cfg.max_rows)
    if eval_cfg.knowledge_path:  # metrics per knowledge label (docs/scope.md#knowledge-aware-scope)
        from eval_hooks.knowledge import attach_knowledge

        rows = attach_knowledge(rows, resolve_data_path(eval_cfg.knowledge_path))
    return rows


def run_eval(backend, rows: list[dict], eval_cfg, out_dir, *, step: int | None = None, progress: bool = True) -> dict:
    """The evaluated family's run on ``rows`` (generation, scoring, metrics, report; written to ``out_dir``):
    the same for ``recipes/evaluate.py`` and the epoch ends. The family's own settings are ``eval.<family>``
    (e.g. ``eval.med``), when its schema has them. ``eval.max_new_tokens`` None = the family's default budget
    for ``rows`` (:func:`eval_budget`)."""
    from eval_hooks import run_matched_eval

    return run_matched_eval(backend, rows, eval_cfg.family, out_dir, step=step,
                            max_new_tokens=eval_budget(eval_cfg, rows), progress=progress,
                            settings=getattr(eval_cfg, eval_cfg.family, None))


def eval_budget(eval_cfg, rows: list[dict]) -> int:
    """The generation budget per row of an evaluation: ``eval.max_new_tokens`` when set, else the family's
    default for ``rows`` (``Family.budget``; e.g. MIST short_text rows: 32)."""
    from eval_hooks.families import get_family

    return get_family(eval_cfg.family).budget(rows, eval_cfg.max_new_tokens)


def make_backend(gen_cfg, model, tokenizer, *, model_path: str, prompt_settings: PromptSettings | None = None,
                 adapter_prefix: str = "policy"):
    """The generation backend of ``generation.backend``; it renders prompts under ``prompt_settings`` (the
    ``prompt`` group), as training does."""
    if gen_cfg.backend == "hf":
        from eval_hooks.backends.hf import HFBackend

        import torch

        from trainer.core.run import resolve_mixed_precision

        device = next(model.parameters()).device.type
        mp = resolve_mixed_precision(gen_cfg.mixed_precision, cpu=device == "cpu")
        dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(mp)
        return HFBackend(model, tokenizer, batch_size=gen_cfg.batch_size, prompt_settings=prompt_settings,
                         autocast_dtype=dtype)
    if gen_cfg.backend == "openai_chat":  # the served model itself; the server applies its chat template
        from eval_hooks.backends.openai_chat import backend_from_config

        return backend_from_config(gen_cfg, prompt_settings)
    from eval_hooks.backends.vllm_server import VLLMServerBackend, read_server_settings

    return VLLMServerBackend(gen_cfg.url, gen_cfg.served_model_name or model_path, tokenizer=tokenizer,
                             timeout_s=gen_cfg.timeout_s, max_retries=gen_cfg.max_retries,
                             prompt_settings=prompt_settings, adapter_prefix=adapter_prefix,
                             error_context=server_log_context(gen_cfg), concurrency=gen_cfg.concurrency,
                             server_kind=gen_cfg.server_kind, timeout_per_token_s=gen_cfg.timeout_per_token_s,
                             server_settings=read_server_settings(gen_cfg.server_log))


def server_log_context(gen_cfg) -> Callable[[], str] | None:
    """``error_context`` for the server client: the engine's own error line (``eval_hooks.io.root_error_line``) and
    the last lines of ``generation.server_log`` (an external server's log file), so a dead server's last words are
    part of the error. None when not set."""
    path = gen_cfg.get("server_log") if hasattr(gen_cfg, "get") else getattr(gen_cfg, "server_log", None)
    if not path:
        return None

    def context() -> str:
        from eval_hooks.io import root_error_line, tail_file

        tail = tail_file(path, 40)
        if not tail:
            return f"[{path}: missing or empty]"
        err = root_error_line(tail_file(path, 400))
        return f"[{path}]\n" + (f"server error: {err}\n" if err else "") + tail

    return context


def server_errors(gen_cfg) -> tuple[type[BaseException], ...]:
    """Exceptions after which ``train_loop`` checkpoints before stopping (``checkpoint_on=``): the server's
    errors (dead, malformed reply, refused adapter) and a failed sync probe; none for in-process HF."""
    if gen_cfg.backend == "hf":
        return ()
    from eval_hooks.backends.vllm_server import ServerError

    from trainer.rl.weight_sync import StaleWeightsError

    return (ServerError, StaleWeightsError)


def build_inference_backend(model_cfg, gen_cfg, *, prompt_settings: PromptSettings | None = None,
                            adapter_path: str | None = None):
    """Backend for a stand-alone (non-training) recipe: the model of ``model_cfg`` (on CUDA when
    present), optionally with a LoRA adapter, in-process or behind a vLLM server, rendering prompts
    under ``prompt_settings``. A ``model.init_adapter`` (``init_adapter_mode=merge``) is merged into the
    base first, as the trainers do."""
    if gen_cfg.backend == "openai_chat":  # nothing loads here: the server holds the model
        return make_backend(gen_cfg, None, None, model_path=model_cfg.path, prompt_settings=prompt_settings)
    from eval_hooks.models import load_tokenizer

    from trainer.model.policy import load_base_with_adapters

    tokenizer = load_tokenizer(model_cfg.path, trust_remote_code=model_cfg.trust_remote_code)
    model = None
    if gen_cfg.backend == "hf":
        import torch

        merged = [model_cfg.init_adapter] if model_cfg.init_adapter and model_cfg.init_adapter_mode == "merge" else []
        model = load_base_with_adapters(model_cfg, merged, device="cuda" if torch.cuda.is_available() else "cpu")
        if adapter_path:
            from peft import PeftModel

            from trainer.model.adapter_check import check_adapter_finite

            check_adapter_finite(adapter_path, "adapter_path")
            # Not merged: bf16 rounding of W + BA would lose part of a small LoRA delta. The backend lets autocast cache
            # its casts of the frozen weights (eval_hooks.backends.hf._casts_cached).
            model = PeftModel.from_pretrained(model, adapter_path)
    backend = make_backend(gen_cfg, model, tokenizer, model_path=model_cfg.path, prompt_settings=prompt_settings)
    if adapter_path and gen_cfg.backend != "hf":
        backend.load_adapter(str(Path(adapter_path).resolve()), "eval")
    return backend


def make_epoch_eval(ctx, rows: list[dict] | None, backend_factory: Callable[[], Any], *, policy=None,
                    tokenizer=None) -> Callable | None:
    """The callable the loop runs at epoch ends: writes ``<run_dir>/eval/epoch_<e>/`` and returns metrics.

    ``backend_factory()`` gives the in-process backend (``generation=hf``). With
    ``generation=vllm_server``, ``policy`` (the unwrapped peft model) and ``tokenizer`` are required: the
    adapter is pushed to the server and probed before every evaluation (module docstring); a failed push
    or probe raises (``AdapterLoadError`` / ``StaleWeightsError``), it never evaluates other weights.
    """
    if rows is None:
        return None
    from trainer.config import ConfigError

    ecfg, gen = ctx.cfg.eval, ctx.cfg.generation
    server = gen.backend == "vllm_server"
    if server:
        if policy is None or tokenizer is None:
            raise ConfigError("generation=vllm_server evaluation needs the policy and tokenizer (make_epoch_eval("
                              "..., policy=, tokenizer=)) to push the current adapter to the server")
        if not hasattr(policy, "peft_config"):
            raise ConfigError("generation=vllm_server: epoch-end evaluation through the server needs a LoRA policy "
                              "(model.lora.enabled=true), because only an adapter can be pushed to a running server; "
                              "with full fine-tuning the server would evaluate its base weights. Use generation=hf.")

        from trainer.rl.weight_sync import adapter_root, lazy_adapter_sync

        server_sync = lazy_adapter_sync(
            lambda: make_backend(gen, policy, tokenizer, model_path=ctx.cfg.model.path,
                                 prompt_settings=PromptSettings.from_config(ctx.cfg.prompt), adapter_prefix="eval"),
            adapter_root(ctx) / "eval", every_k_steps=1, keep_last=1, tokenizer=tokenizer,
            probe_threshold=gen.probe_threshold, main_process=True)

    def on_epoch_end(epoch, step: int) -> dict:
        out = Path(ctx.run_dir) / "eval" / (f"epoch_{epoch}" if isinstance(epoch, int) else str(epoch))
        sync_info = None
        if server:
            sync = server_sync()
            sync_info = sync.sync(policy, step)  # save + load + probe, or raise: never stale or base weights
            backend = sync.backend
        else:
            backend = backend_factory()
        result = run_eval(backend, rows, ecfg, out, step=step, progress=ctx.cfg.trainer.progress)
        if sync_info is not None:
            from eval_hooks.io import write_json_atomic

            info = {**sync_info, "served_adapter": sync.backend.current_adapter, "step": step}
            write_json_atomic(out / "adapter_sync.json", info)
            result = {**result, "adapter_sync": {k: v for k, v in info.items() if isinstance(v, (int, float))}}
        return result

    return on_epoch_end
