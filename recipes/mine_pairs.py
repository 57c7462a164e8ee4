"""SCOPE pair mining (docs/scope.md#pair-mining): r+ / r- from the base model's own outputs.

    python recipes/mine_pairs.py                                       # tiny model, toy training items
    python recipes/mine_pairs.py model.path=Qwen/Qwen3-4B items_path=mist_train.jsonl out_dir=runs/pairs

The mining itself (which items are kept, the fallback, the knowledge-aware pools) is
:func:`trainer.data.mining.mine`; this entry point validates the config and the items, loads the model and
writes the results.

Outputs in ``out_dir``: ``pairs.jsonl`` (the pair-file format of ``trainer/data/train_data.py``) and
``mining_stats.json`` (kept and dropped items, each drop with its reason; with knowledge estimation
also ``knowledge``: counts per label and per pool) and ``knowledge.jsonl`` (the estimate per item).
"""

from __future__ import annotations

import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from eval_hooks.cli_contract import under_contract
from selectrust.core.conf_dir import CONF_DIR
from trainer.config.cli_help import cli_main
from trainer.config import register_schemas, validate_common, validate_knowledge
from trainer.config.roots import MineRunConfig
from trainer.config.settings import to_settings
from trainer.data.mining import mine
from eval_hooks import load_rows
from selectrust.generation.backends.base import GreedyMemo
from selectrust.core.io import write_json_atomic, write_jsonl_atomic
from selectrust.model import is_toy_model
from selectrust.model.load import TOY_ANSWER_BUDGET
from eval_hooks.parsers import answer_budget
from selectrust.generation.prompts import PromptSettings
from trainer.runtime.run import seed_everything

register_schemas()


def run(cfg: DictConfig | MineRunConfig) -> dict:
    """Mine; returns the statistics written to ``<out_dir>/mining_stats.json``. ``cfg``: the composed config
    (checked and turned into typed settings here, before any model loads) or those settings already typed."""
    from trainer.data.train_data import resolve_data_path  # deferred: imports numpy
    from trainer.eval_bridge import build_inference_backend  # deferred: tests patch it

    cfg: MineRunConfig = to_settings(cfg, validate_common)  # the typed settings, from here down
    validate_knowledge(cfg.knowledge, cfg.generation)
    rows = load_rows("mist", resolve_data_path(cfg.items_path))  # validated before the model loads
    seed_everything(cfg.seed)
    prompt = PromptSettings.from_config(cfg.prompt)
    budget = cfg.max_new_tokens or (TOY_ANSWER_BUDGET if is_toy_model(cfg.model.path)
                                    else answer_budget({r["answer_type"] for r in rows}))
    # fixed weights: a greedy answer asked twice (the k=1 knowledge estimate, then the clean row) is generated once
    backend = GreedyMemo(build_inference_backend(cfg.model, cfg.generation, prompt_settings=prompt))
    pairs, stats = mine(rows, backend, max_new_tokens=budget, use_fallback=cfg.use_fallback,
                        fallback_note=cfg.fallback_note, leak_patterns=list(cfg.leak_patterns),
                        model_name=cfg.model.path, prompt_settings=prompt, knowledge=cfg.knowledge, seed=cfg.seed)
    out = Path(cfg.out_dir)
    if "knowledge" in stats:
        write_jsonl_atomic(out / "knowledge.jsonl", stats.pop("knowledge_items"))
    write_json_atomic(out / "mining_stats.json", stats)
    if pairs:
        write_jsonl_atomic(out / "pairs.jsonl", pairs)
    print(f"[selectrust] mined {stats['kept']} of {stats['items']} items "
          f"({stats['kept_by_source']}); dropped {stats['dropped_by_reason']} -> {out}")
    return stats


def say_if_empty(stats: dict) -> None:
    """The command's one line on stderr when mining kept no pair. Said by :func:`main` only: a demo running
    :func:`run` as a stage says it once itself (its stage check), also when it reuses the finished stage."""
    extra = sum(stats["knowledge"]["per_pool"].values()) if "knowledge" in stats else 0  # knowledge-aware pools
    if not stats["kept"] and not extra:
        print("[selectrust] no pairs kept: the base model never followed a misleading signal while being "
              "correct when clean (see mining_stats.json)", file=sys.stderr)


@hydra.main(config_path=str(CONF_DIR), config_name="mine_pairs", version_base=None)
@under_contract
def main(cfg: DictConfig) -> None:
    say_if_empty(run(cfg))


if __name__ == "__main__":
    cli_main("mine_pairs", main)
