"""The embedded demo: reproduce the SCOPE effect (and a Box2 stage) from scratch on a laptop CPU.

    python recipes/demo.py                      # writes demo_out/report.md and demo_out/summary.json
    python recipes/demo.py out=/tmp/d seed=3    # another toy task; the targets must still hold

This file is the entry point only. The demo lives in its own package, ``toy_demo/``: the toy key->digit
task and its ``toy:<seed>/<file>`` data source (``toy_demo/task.py``), this entry point's schema
(``toy_demo/config.py``), the orchestration of the stages (``toy_demo/pipeline.py``) and the report
(``toy_demo/report.py``). What it runs and what it shows: docs/demo.md.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from trainer.config.cli_help import cli_main
from toy_demo.config import register

register()


def run(cfg: DictConfig) -> dict:
    """Every stage of the demo (``toy_demo.pipeline.run``); returns the summary."""
    from toy_demo import pipeline

    return pipeline.run(cfg)


@hydra.main(config_path="../conf", config_name="demo", version_base=None)
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    cli_main("demo", main)
