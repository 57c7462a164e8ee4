"""Chained stages: SFT then GRPO (Box2), SFT then DPO, ... as one re-runnable command.

    python recipes/chain.py recipe=box2_tiny trainer.run_dir=runs/box2_chain        # tiny CPU model, LoRA in both
    python recipes/chain.py recipe=scope_sft_then_dpo_tiny trainer.run_dir=runs/sft_dpo
    accelerate launch --config_file launch/ddp.yaml --num_processes 8 recipes/chain.py recipe=box2_qwen3_4b \
        trainer.run_dir=runs/box2_qwen3 "stages.sft.extra=['data.train_path=cf_sft.jsonl']" \
        "stages.grpo.extra=['data.train_path=aime_prompts.jsonl']"

A chain recipe (``conf/recipe/<name>.yaml``) names its stages in order; each is a trainer script
(``sft`` | ``dpo`` | ``grpo``) with Hydra overrides of that trainer's own config, trained in
``<run_dir>/stages/<name>/`` and started from the previous stage's ``final/`` adapter (``init_mode``:
merge it into the base and train a fresh LoRA, or continue training it; see ``selectrust/model/policy.py``).
Run the same command again after an interruption: finished stages are skipped, the interrupted one
resumes from its newest complete checkpoint. ``"common=['k=v',...]"`` adds overrides to every stage.
A stage trained from an earlier stage's ``final/`` that has since been retrained is refused (naming both
content hashes); ``trainer.rerun_stale_stages=true`` retrains it instead.
The stages run in this one process (``recipes/stages/``), one after another.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from eval_hooks.cli_contract import under_contract
from selectrust.core.conf_dir import CONF_DIR
from trainer.config.cli_help import cli_main
from trainer.config import compose, register_schemas
from trainer.config.roots import ChainRunConfig
from trainer.config.settings import to_settings
from recipes.stage_recipes import runners, trainers
from recipes.stages import StageRunner, chain_stages

register_schemas()


def chain_runner(cfg: DictConfig | ChainRunConfig):
    """The chain's stage runner and its stages, every stage's config composed and checked (a bad chain or stage
    config fails here, before any model loads)."""
    cfg: ChainRunConfig = to_settings(cfg)  # the typed settings, from here down (each stage's config: its recipe's)
    checks = trainers()  # the recipes a chain stage may name (``script``), each with its config check
    stages = chain_stages(cfg.stages, list(cfg.common), checks)
    runner = StageRunner(cfg.trainer.run_dir, seed=cfg.seed, compose=compose, runners=runners(checks),
                         prefix="[chain]", rerun_stale=cfg.trainer.rerun_stale_stages, record="chain.json")
    runner.check(stages, checks)
    return runner, stages


def run(cfg: DictConfig | ChainRunConfig) -> dict:
    """Run (or continue) the chain; returns ``{stage: record}`` as written to ``<run_dir>/chain.json``."""
    runner, stages = chain_runner(cfg)
    with runner.hold("chain.log"):  # one chain per directory; chain.log written under the lock
        runner.run_all(stages)
    return runner.records


@hydra.main(config_path=str(CONF_DIR), config_name="chain", version_base=None)
@under_contract
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    cli_main("chain", main)
