"""Epoch-end matched evaluation for every trainer, through ``eval_hooks`` (the same code the CLI uses).

``load_eval_rows`` runs before any model loads, so a broken evaluation file fails the run at start-up
rather than after the first epoch. ``make_backend`` builds the generation backend named by the
``generation`` config: in-process HF over the live policy, or the vLLM server client.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable


def load_eval_rows(eval_cfg) -> list[dict] | None:
    if not eval_cfg.enabled or not eval_cfg.path:
        return None
    from eval_hooks import load_rows

    from .data import resolve_data_path

    rows = load_rows(eval_cfg.family, resolve_data_path(eval_cfg.path))
    if eval_cfg.max_rows is not None and len(rows) > eval_cfg.max_rows:
        keep_items: list[str] = []
        count = 0
        for r in rows:  # whole items only, in file order
            if r["item_id"] not in keep_items:
                if count >= eval_cfg.max_rows:
                    break
                keep_items.append(r["item_id"])
            count += 1
        keep = set(keep_items)
        rows = [r for r in rows if r["item_id"] in keep]
    return rows


def make_backend(gen_cfg, model, tokenizer, *, model_path: str, use_chat_template: bool = True):
    if gen_cfg.backend == "hf":
        from eval_hooks.backends.hf import HFBackend

        return HFBackend(model, tokenizer, batch_size=gen_cfg.batch_size, use_chat_template=use_chat_template)
    from eval_hooks.backends.vllm_server import VLLMServerBackend

    return VLLMServerBackend(gen_cfg.url, gen_cfg.served_model_name or model_path, tokenizer=tokenizer,
                             timeout_s=gen_cfg.timeout_s, max_retries=gen_cfg.max_retries,
                             use_chat_template=use_chat_template)


def make_epoch_eval(ctx, rows: list[dict] | None, backend_factory: Callable[[], Any]) -> Callable | None:
    """The callable the loop runs at epoch ends: writes ``<run_dir>/eval/epoch_<e>/`` and returns metrics."""
    if rows is None:
        return None
    from eval_hooks import run_matched_eval

    ecfg = ctx.cfg.eval

    def on_epoch_end(epoch, step: int) -> dict:
        out = Path(ctx.run_dir) / "eval" / (f"epoch_{epoch}" if isinstance(epoch, int) else str(epoch))
        return run_matched_eval(backend_factory(), rows, ecfg.family, out, step=step,
                                max_new_tokens=ecfg.max_new_tokens, system_prompt=ecfg.system_prompt,
                                prompt_prefix=ecfg.prompt_prefix,
                                use_chat_template=ctx.cfg.model.use_chat_template, progress=ctx.cfg.trainer.progress)

    return on_epoch_end
