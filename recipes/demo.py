"""The embedded demos, on a laptop CPU.

    python recipes/demo.py                      # SmolLM2-135M-Instruct learns selective trust on real facts (quick)
    python recipes/demo.py out=/tmp/d seed=3    # another facts split; writes /tmp/d/report.md and summary.json
    python recipes/demo.py demo=real_full       # the full experiment: every arm, 20 GRPO steps (the seed table's)
    python recipes/demo.py demo=toy             # the random-init toy model: the SCOPE effect and a Box2 stage
    python -m demos.real.second_relation RUN ... --relation currency --split dev --out DIR  # a second held-out relation

This file is the entry point only. The demos live in their own package, ``demos/``: this entry point's schema
(``demos/config.py``); the real-model demo's stages and report (``demos/real/``; docs/real_model.md#the-real-model-demo);
the toy key->digit task and its ``toy:<seed>/<file>`` data source, the toy demo's stages and report (``demos/toy/``;
docs/demo.md). A demo names its stages' recipes; this entry point hands their ``run`` functions and the stage runner
(``recipes/stages/``) down (the demos package never imports ``recipes``); so does ``python -m
demos.real.second_relation``, which hands its arguments here (``second-relation ...``, :func:`second_relation`).
"""

from __future__ import annotations

import sys

import hydra
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig

from demos.config import DEMOS, DemoRunConfig, register
from eval_hooks.cli_contract import end_process, run_with_contract, split_debug, under_contract
from selectrust.core.conf_dir import CONF_DIR
from trainer.config.cli_help import cli_main, config_errors
from trainer.config.settings import to_settings
from demos.real import pipeline as real
from demos.real import second_relation as second
from demos.toy import pipeline as toy
from recipes.stage_recipes import runners, trainers
from recipes.stages import StageRunner
from trainer.config import compose

register()


def run(cfg: DictConfig | DemoRunConfig) -> dict:
    """Every stage of the chosen demo (``demos.config.DEMOS``) by the pipeline of its section
    (``demos.real.pipeline.run`` for demo=real and real_full, ``demos.toy.pipeline.run`` for demo=toy); returns the
    summary."""
    cfg: DemoRunConfig = to_settings(cfg)  # the typed settings, from here down (each stage's config: its recipe's)
    section = DEMOS.get(cfg.demo).section
    pipeline = next(p for p in (real, toy) if p.SECTION == section)
    return pipeline.run(cfg, compose=compose, runners=runners(pipeline.RECIPES), checks=trainers(),
                        stage_runner=StageRunner)


@hydra.main(config_path=str(CONF_DIR), config_name="demo", version_base=None)
@under_contract
def main(cfg: DictConfig) -> None:
    run(cfg)


def second_relation(argv: list[str]) -> int:
    """``python -m demos.real.second_relation ARGS`` (run here as ``second-relation ARGS``): its evaluation stages run
    by the stage runner with the evaluate recipe, their configs composed from ``conf/``
    (:mod:`demos.real.second_relation`)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base=None):
        return second.main(argv, tools=second.Tools(compose, runners(second.RECIPES), StageRunner))


if __name__ == "__main__" and sys.argv[1:2] == [second.SUBCOMMAND]:  # demos.real.second_relation's runs; it exits
    _debug, _argv = split_debug(sys.argv[2:])  # the contract of every entry point: a bad run one line, exit 2
    end_process(run_with_contract(lambda: second_relation(_argv), input_errors=config_errors(), debug=_debug))

if __name__ == "__main__":
    cli_main("demo", main)
