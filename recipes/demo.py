"""The embedded demos, on a laptop CPU.

    python recipes/demo.py                      # SmolLM2-135M-Instruct learns selective trust on real facts
    python recipes/demo.py out=/tmp/d seed=3    # another facts split; writes /tmp/d/report.md and summary.json
    python recipes/demo.py demo=toy             # the random-init toy model: the SCOPE effect and a Box2 stage

This file is the entry point only. The demos live in their own package, ``toy_demo/``: this entry point's
schema (``toy_demo/config.py``); the real-model demo's orchestration and report (``toy_demo/real.py``,
``toy_demo/real_report.py``; docs/real_model.md#the-real-model-demo); the toy key->digit task and its
``toy:<seed>/<file>`` data source (``toy_demo/task.py``), the toy demo's orchestration and report
(``toy_demo/pipeline.py``, ``toy_demo/report.py``; docs/demo.md).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from trainer.config.cli_help import cli_main
from toy_demo.config import register

register()


def run(cfg: DictConfig) -> dict:
    """Every stage of the chosen demo (``toy_demo.real.run`` or, with demo=toy, ``toy_demo.pipeline.run``);
    returns the summary."""
    from toy_demo import pipeline, real

    return (real if cfg.demo == "real" else pipeline).run(cfg)


@hydra.main(config_path="../conf", config_name="demo", version_base=None)
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    cli_main("demo", main)
