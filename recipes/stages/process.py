"""The process a stage runner runs in: which rank writes the stage files, and the accelerate state reset
between two training stages of one process."""

from __future__ import annotations
import os


def main_process() -> bool:
    """The main process of a launch (``RANK`` as set by accelerate/torchrun; a plain run has none)."""
    return os.environ.get("RANK", "0") == "0"


def reset_accelerate() -> None:
    """Forget the previous stage's accelerate state (mixed precision, device) before building the next one."""
    from accelerate.state import AcceleratorState, GradientState, PartialState  # deferred: imports torch, accelerate

    AcceleratorState._reset_state(True)
    GradientState._reset_state()
    PartialState._reset_state()
