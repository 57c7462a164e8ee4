"""The LR decays after warm-up by name (``optim.scheduler``): :data:`DECAYS`, the one table that
:func:`trainer.runtime.optim.lr_lambda` looks the name up in and that the config's choice
(``trainer.config.choices.Scheduler``) and its help text are built from. Standard library only, so the config
schemas list the names without importing torch."""

from __future__ import annotations

import math
from typing import Callable


def cosine(progress: float) -> float:
    return 0.5 * (1.0 + math.cos(math.pi * progress))


def linear(progress: float) -> float:
    return 1.0 - progress


def constant(progress: float) -> float:
    return 1.0


#: ``optim.scheduler`` -> the multiplier of the peak LR at ``progress`` in [0, 1] of the steps after warm-up.
DECAYS: dict[str, Callable[[float], float]] = {"cosine": cosine, "linear": linear, "constant": constant}


def decay(name: str) -> Callable[[float], float]:
    """The decay called ``name``; ValueError naming the known ones otherwise."""
    if name not in DECAYS:
        raise ValueError(f"unknown LR scheduler {name!r}; known: {' | '.join(DECAYS)}")
    return DECAYS[name]
