"""Compose the real Hydra configs and run recipes in-process (tests only)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"  # the checkout's (selectrust.core.conf_dir.CONF_DIR is the same here; the wheel check covers an install)


def compose(config_name: str, overrides: list[str] | None = None):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from trainer.config import register_schemas

    register_schemas()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base=None):
        return hydra_compose(config_name=config_name, overrides=list(overrides or []))


def load_recipe(name: str):
    """The module ``recipes.<name>`` (``recipes`` is a package; its ``run(cfg)`` is what the tests call)."""
    return importlib.import_module(f"recipes.{name}")


def spy_greedy_memos(monkeypatch) -> list:
    """The list every :class:`~selectrust.generation.backends.base.GreedyMemo` made from now on is appended to (its ``hits``
    say how many greedy answers it served again)."""
    from selectrust.generation.backends import base

    made = []
    real_init = base.GreedyMemo.__init__

    def spy(self, inner):
        real_init(self, inner)
        made.append(self)

    monkeypatch.setattr(base.GreedyMemo, "__init__", spy)
    return made


def reset_accelerate() -> None:
    from accelerate.state import AcceleratorState, GradientState, PartialState

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    PartialState._reset_state()


def run_recipe(name: str, config_name: str, overrides: list[str]):
    reset_accelerate()
    cfg = compose(config_name, overrides)
    return load_recipe(name).run(cfg)


def read_metrics(run_dir) -> list[dict]:
    return [json.loads(l) for l in (Path(run_dir) / "metrics.jsonl").read_text().splitlines() if l.strip()]
