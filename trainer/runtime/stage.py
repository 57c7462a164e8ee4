"""A stage of a multi-stage run, as declared: :class:`Stage` (a name, a recipe or a step, the recipe's overrides, its
inputs and start). The chains (``recipes/chain.py``), the distillation pipelines (``recipes/pipelines/``) and the
demos (``demos/``) declare their stages with it; the stage runner that runs them is ``recipes/stages/`` (above the
recipes it runs: it is handed their ``run`` functions). The declaration stays down here so that the demos, which
``recipes/demo.py`` imports, can declare stages without importing ``recipes``."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable

#: What a stage name may be (it names a directory).
STAGE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")


@dataclass
class Stage:
    """One stage of a stage runner (``recipes/stages/runner.py``'s module docstring says how each field is used)."""

    name: str
    recipe: str | None = None  # a name of the runner's ``runners``, run on the config composed from ``overrides``
    overrides: list[str] = field(default_factory=list)
    inputs: dict[str, str] = field(default_factory=dict)  # config key -> "<earlier stage>[/<path in its output>]"
    start: str | None = None  # a training stage: the earlier stage whose final/ weights it starts from
    init_mode: str = "merge"  # an adapter there is merged into model.path, or trained on (continue)
    call: Callable[..., Any] | None = None  # instead of a recipe: a step of the stage's directory (and its inputs')
    check: Callable[[Any], None] | None = None  # raises when the result is unusable, before a later stage runs
    dir: str | None = None  # the stage's directory relative to the root (default stages/<name>)
    seed: int | None = None  # its own seed (None: the runner's): a seed-independent stage's (demos/real/stage_cache.py)
