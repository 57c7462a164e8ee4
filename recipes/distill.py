"""Taste-Bench privileged-teacher distillation (docs/taste.md#distillation-trainer): stage 1 (KL), stage 2 (calibration).

    python recipes/distill.py recipe=taste_tiny trainer.run_dir=runs/taste_tiny seed=0   # CPU proof, end to end
    python recipes/distill.py recipe=opsd_tiny trainer.run_dir=runs/opsd_tiny seed=0     # SCOPE's OPSD baseline (MIST):
                                                                                         # pipeline.kind=opsd
    python recipes/distill.py recipe=taste_qwen3_4b trainer.run_dir=runs/taste data.train_path=fold_0.jsonl \
        data.eval_path=fold_1.jsonl

``main`` runs the pipeline of ``pipeline.kind``: ``taste`` (toy only: build the fork task, split it into
two task-disjoint folds, SFT a demonstration-following base) -> stage 1 -> stage 2, each a run of the stage
recipe ``distill`` (``recipes/distill_stage.py``) in ``<run_dir>/stages/<name>/`` through the stage runner
(stage 2 starts from stage 1's adapter), then the evaluation of teacher and student on the held-out fold,
``summary.json`` and ``report.md``; or ``opsd`` (``recipes/pipelines/opsd.py``).

:func:`pipeline` runs the stages of ``pipeline.kind`` through the stage runner with the recipes of the one
stage table (``recipes/stage_recipes.py``'s :data:`~recipes.stage_recipes.STAGE_RECIPES`); each distillation stage is
``recipes/distill_stage.py``'s ``run`` (what ``recipes/chain.py`` also runs for ``script: distill``), a module of its
own so that the stage table and this entry point do not import each other.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from selectrust.core.conf_dir import CONF_DIR
from eval_hooks.cli_contract import under_contract
from trainer.config.cli_help import cli_main
from trainer.config import register_schemas, validate_distill, compose
from trainer.config.roots import DistillRunConfig
from trainer.config.settings import to_settings
from recipes.pipelines import PIPELINES
from recipes.stage_recipes import runners

register_schemas()

#: The recipes the distillation pipelines' stages name (each looked up in the one stage table).
STAGES = ("sft", "evaluate", "distill")


def pipeline(cfg: DictConfig | DistillRunConfig, overrides: list[str] | None = None) -> dict:
    """``pipeline.kind=taste``: toy data + base (data.source=toy), stage 1, stage 2, held-out evaluation,
    ``summary.json``; ``pipeline.kind=opsd`` (e.g. recipe=opsd_tiny): an optional base SFT, OPSD and the MIST
    evaluation (``recipes/pipelines/opsd.py``). ``overrides``: the stages' overrides (default: the command line's)."""
    cfg: DistillRunConfig = to_settings(cfg, validate_distill)  # checked before any stage runs; typed from here down
    kind = PIPELINES.get(cfg.pipeline.kind)
    return kind(cfg, compose=compose, runners=runners(STAGES), overrides=overrides).run()  # summary.json as returned


@hydra.main(config_path=str(CONF_DIR), config_name="distill", version_base=None)
@under_contract
def main(cfg: DictConfig) -> None:
    pipeline(cfg)


if __name__ == "__main__":
    cli_main("distill", main)
