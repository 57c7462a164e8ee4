"""Matched-condition evaluation of one model: model + dataset + family -> generate -> score.

    python recipes/evaluate.py                                     # tiny model on the toy MIST set
    python recipes/evaluate.py model.path=Qwen/Qwen3-4B eval=mist eval.path=mist.jsonl out_dir=runs/eval_qwen
    python recipes/evaluate.py prompt=prompt_defense eval.path=...   # the Prompt-Defense baseline
    python recipes/evaluate.py adapter_path=runs/scope/final ...   # a trained LoRA adapter
    python recipes/evaluate.py eval=medcounterfact eval.path=medevidence_abstract.jsonl  # MedCounterfact

Writes ``<out_dir>/metrics.json``, ``item_scores.jsonl`` and ``report.md`` with plots, through the same
family run (``trainer.eval_bridge.run_eval`` -> ``eval_hooks.run_matched_eval``) that trainers call at epoch ends. Generations made elsewhere are scored
with ``python -m eval_hooks score`` instead.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from eval_hooks.cli_contract import under_contract
from selectrust.core.conf_dir import CONF_DIR
from trainer.config.cli_help import cli_main
from selectrust.core.errors import ConfigError
from trainer.config import check_adapter_weights, register_schemas, validate_common, validate_knowledge
from trainer.config.roots import EvaluateRunConfig
from trainer.config.settings import to_settings
from selectrust.generation.backends.base import GreedyMemo
from eval_hooks.families import get_family
from selectrust.generation.prompts import PromptSettings
from trainer.runtime.run import seed_everything
from selectrust.generation.prompts import PromptSettings, render_prompt
from trainer.config.budget import shape_of_model
from trainer.config.validation import check_generation_budget
from selectrust.conditions import CLEAN
from selectrust.core.io import write_jsonl_atomic
from eval_hooks.knowledge import attach_knowledge, estimate_from_config, knowledge_record
from trainer.eval_bridge import eval_budget

register_schemas()


def run(cfg: DictConfig | EvaluateRunConfig) -> dict:
    """Evaluate; returns the metrics written to ``<out_dir>/metrics.json``. ``cfg``: the composed config (checked
    and turned into typed settings here, before any model loads) or those settings already typed."""
    from trainer.eval_bridge import build_inference_backend, load_eval_rows, run_eval  # deferred: tests patch it

    cfg: EvaluateRunConfig = to_settings(cfg, validate_common)  # the typed settings, from here down
    if not cfg.eval.path:
        raise ConfigError("eval.path is not set: point it at an items file of family eval.family")
    if cfg.adapter_path:
        from selectrust.model import check_adapter_path

        try:
            check_adapter_path(cfg.adapter_path)
        except (FileNotFoundError, ValueError) as e:
            raise ConfigError(str(e)) from None
        check_adapter_weights(cfg.adapter_path, cfg.model, "adapter_path")  # finite, and fits model.path
    validate_knowledge(cfg.knowledge, cfg.generation)
    if cfg.knowledge.enabled and (cfg.eval.knowledge_path or not get_family(cfg.eval.family).knowledge_labels):
        raise ConfigError("knowledge.enabled estimates the evaluated model's knowledge of the items from their clean "
                          "rows: it needs a family whose metrics split by knowledge labels (eval.family=mist) and no "
                          "eval.knowledge_path (a given estimate)")
    rows = load_eval_rows(cfg.eval)  # validated before the model loads
    seed_everything(cfg.seed)
    # fixed weights: with a k=1 knowledge estimate, its greedy clean answers are the clean rows' (generated once)
    backend = GreedyMemo(build_inference_backend(cfg.model, cfg.generation, adapter_path=cfg.adapter_path,
                                                 prompt_settings=PromptSettings.from_config(cfg.prompt)))
    check_eval_budget(cfg, backend, rows)
    if cfg.knowledge.enabled:
        rows = estimate_and_attach(rows, backend, cfg)
    metrics = run_eval(backend, rows, cfg.eval, cfg.out_dir)  # the family's run (Med: formats, mitigations, ...)
    headline = {k: v for k, v in metrics.items() if isinstance(v, (int, float))}
    print(f"[selectrust] wrote {cfg.out_dir}/metrics.json: {headline}")
    return metrics


def check_eval_budget(cfg: EvaluateRunConfig, backend, rows: list[dict]) -> None:
    """``eval.max_new_tokens`` plus the longest rendered prompt within the loaded model's positions, and an evaluation
    batch within memory (trainer/config/budget.py), before any generation; an in-process backend only (a server's
    model and memory are its own)."""
    inner = getattr(backend, "inner", backend)
    tokenizer, model = getattr(inner, "tokenizer", None), getattr(inner, "model", None)
    shape = shape_of_model(model) if model is not None else None
    if tokenizer is None or shape is None or cfg.eval.max_new_tokens is None:
        return

    if hasattr(get_family(cfg.eval.family).own_settings(None), "prompt_token_budget"):
        longest = 0  # the family fits its prompts to the positions left (Med: prompt_token_budget)
    else:
        settings = PromptSettings.from_config(cfg.prompt)
        longest = max((len(render_prompt(tokenizer, r["prompt"], settings)) for r in rows
                       if isinstance(r.get("prompt"), (str, list))), default=0)
    check_generation_budget(cfg, shape, longest, keys=("eval.max_new_tokens",),
                            prompt_what=" (an evaluation prompt, rendered)")


def estimate_and_attach(rows: list[dict], backend, cfg: EvaluateRunConfig) -> list[dict]:
    """The evaluated model's own knowledge estimate over the items (``knowledge`` group), written to
    ``<out_dir>/knowledge.jsonl`` (pass it as ``eval.knowledge_path`` when evaluating the trained model,
    so both runs split by the knowledge the model had *before* training) and attached to the rows."""
    clean = [r for r in rows if r["condition"] == CLEAN]
    est = estimate_from_config(clean, backend, cfg.knowledge, max_new_tokens=eval_budget(cfg.eval, clean),
                               seed=cfg.seed)
    path = write_jsonl_atomic(Path(cfg.out_dir) / "knowledge.jsonl", [knowledge_record(e) for e in est.values()])
    return attach_knowledge(rows, path)


@hydra.main(config_path=str(CONF_DIR), config_name="evaluate", version_base=None)
@under_contract
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    cli_main("evaluate", main)
