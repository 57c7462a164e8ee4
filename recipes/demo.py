"""The embedded demos, on a laptop CPU.

    python recipes/demo.py                      # SmolLM2-135M-Instruct learns selective trust on real facts (quick)
    python recipes/demo.py out=/tmp/d seed=3    # another facts split; writes /tmp/d/report.md and summary.json
    python recipes/demo.py demo=real_full       # the full experiment: every arm, 20 GRPO steps (the seed table's)
    python recipes/demo.py demo=toy             # the random-init toy model: the SCOPE effect and a Box2 stage

This file is the entry point only. The demos live in their own package, ``demos/``: this entry point's schema
(``demos/config.py``); the real-model demo's stages and report (``demos/real/``; docs/real_model.md#the-real-model-demo);
the toy key->digit task and its ``toy:<seed>/<file>`` data source, the toy demo's stages and report (``demos/toy/``;
docs/demo.md). A demo names its stages' recipes; this entry point hands their ``run`` functions down (the demos
package never imports ``recipes``).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from demos.config import REAL_DEMOS, register
from eval_hooks.cli_contract import under_contract
from trainer.config.cli_help import cli_main

register()


def run(cfg: DictConfig) -> dict:
    """Every stage of the chosen demo (``demos.real.pipeline.run`` for demo=real and real_full, or, with demo=toy,
    ``demos.toy.pipeline.run``); returns the summary."""
    from demos.real import pipeline as real
    from demos.toy import pipeline as toy
    from recipes.chain import compose, recipe_runners, trainers

    demo = real if cfg.demo in REAL_DEMOS else toy
    return demo.run(cfg, compose=compose, runners=recipe_runners(demo.RECIPES), checks=trainers())


@hydra.main(config_path="../conf", config_name="demo", version_base=None)
@under_contract
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    cli_main("demo", main)
