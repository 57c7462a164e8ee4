"""Advice from a distilled Taste student (docs/taste.md#advice): one note per fork.

    python recipes/advise.py recipe=taste_tiny model.path=runs/taste_tiny/stages/base/final \
        "advice.adapters=[runs/taste_tiny/stages/stage1/final,runs/taste_tiny/stages/stage2/final]" \
        advice.forks_path=forks.jsonl advice.out=advice.jsonl

For every fork the student writes its reasoning for both candidate orders (greedy), its A-vs-B
log-odds at the choice position are summed over the two orders in the stored candidates' terms, and
the favoured candidate is rendered into ``advice.template``. Uses the distillation config (prompt
style, answer prefix, choice tokens, reasoning budget) of ``conf/distill.yaml``.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from eval_hooks.cli_contract import under_contract
from selectrust.core.conf_dir import CONF_DIR
from trainer.config.cli_help import cli_main
from selectrust.core.errors import ConfigError
from trainer.config import check_adapter_dir, register_schemas, validate_common
from trainer.config.validation import DISTILL_BUDGET_KEYS
from trainer.config.roots import DistillRunConfig
from trainer.config.settings import to_settings
from selectrust.core.io import read_records, write_jsonl_atomic
from selectrust.model import load_base_with_adapters, load_tokenizer
from selectrust.generation.prompts import PromptSettings
from trainer.distill.advice import advice_from_log_odds
from trainer.distill.views import load_fork_views

register_schemas()


def run(cfg: DictConfig | DistillRunConfig) -> list[dict]:
    """Write advice notes for ``advice.forks_path``; returns them. ``cfg``: the composed config (checked and turned
    into typed settings here, before any model loads) or those settings already typed."""
    from trainer.distill.evaluation import eval_settings, evaluate_views  # deferred: imports torch

    # the typed settings, from here down; the budgets checked: distillation's (its reasoning)
    cfg: DistillRunConfig = to_settings(cfg, validate_common, budget_keys=DISTILL_BUDGET_KEYS)
    adv, a = cfg.advice, cfg.algo
    if not adv.forks_path or not adv.out:
        raise ConfigError("advice.forks_path and advice.out: give the fork items and the advice file to write")
    for i, path in enumerate(adv.adapters):
        check_adapter_dir(path, f"advice.adapters[{i}]")
    views = load_fork_views(adv.forks_path, style=cfg.data.prompt_style, demonstration=a.demonstration,
                            require_task_id=False)
    items = {str(rec["item_id"]): rec for _, rec in read_records(adv.forks_path)}
    tokenizer = load_tokenizer(cfg.model.path, trust_remote_code=cfg.model.trust_remote_code)
    model = load_base_with_adapters(cfg.model, list(adv.adapters))
    result = evaluate_views(model, tokenizer, views, teacher=False, settings=PromptSettings.from_config(cfg.prompt),
                            **eval_settings(tokenizer, a), batch_size=cfg.pipeline.eval_batch_size, seed=cfg.seed,
                            device=next(model.parameters()).device)
    rows = advice_from_log_odds(views, result["log_odds"], items, adv.template)
    write_jsonl_atomic(adv.out, rows)
    print(f"[advise] {len(rows)} advice notes -> {adv.out}", flush=True)
    return rows


@hydra.main(config_path=str(CONF_DIR), config_name="distill", version_base=None)
@under_contract
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    cli_main("distill", main)
