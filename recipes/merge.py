"""Export: write a merged model directory (safetensors) from a base model and LoRA adapter(s).

    python recipes/merge.py model.path=Qwen/Qwen3-4B adapters=[runs/box2/stages/sft/final] out_dir=merged/box2_sft
    python recipes/merge.py model.path=<base> adapters=[<sft>/final,<grpo>/final] out_dir=<dir>   # a merge-mode chain

The adapters are folded into ``model.path``'s weights in the given order (a chain stage trained with
``init_adapter_mode=merge`` holds an adapter on top of the previous one merged, so list them in stage
order). The result (config, ``model.safetensors``, tokenizer, ``merge_info.json``) can be served by
vLLM, uploaded, or used as ``model.path`` of a later run. Written to a temporary sibling, then renamed.
"""

from __future__ import annotations

from pathlib import Path

import hydra
from omegaconf import DictConfig

from eval_hooks.cli_contract import under_contract
from selectrust.core.conf_dir import CONF_DIR
from trainer.config.cli_help import cli_main
from trainer.config import register_schemas, validate_merge
from trainer.config.roots import MergeRunConfig
from trainer.config.settings import to_settings
from selectrust.model import export_merged

register_schemas()


def run(cfg: DictConfig | MergeRunConfig) -> Path:
    """Merge and write; returns the output directory. ``cfg``: the composed config (checked and turned into typed
    settings here, before any model loads) or those settings already typed."""
    cfg: MergeRunConfig = to_settings(cfg, validate_merge)  # the typed settings, from here down
    out = export_merged(cfg.model, list(cfg.adapters), cfg.out_dir)
    print(f"[selectrust] merged {len(cfg.adapters)} adapter(s) into {cfg.model.path}: {out}", flush=True)
    return out


@hydra.main(config_path=str(CONF_DIR), config_name="merge", version_base=None)
@under_contract
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    cli_main("merge", main)
