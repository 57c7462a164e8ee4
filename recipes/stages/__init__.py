"""The stage runner (:class:`StageRunner`, ``runner.py``): named stages run one after another in one process, each
in its own directory under one root. It runs whole workflows (the chains, the distillation pipelines, the demos) and
calls the recipes' ``run`` functions, handed to it by name, so it sits here, above the recipes it runs, and nothing
below ``recipes/`` imports it. A stage is declared with :class:`trainer.runtime.stage.Stage`, which stays below so the
demos can declare theirs without importing ``recipes``.

Modules: ``runner`` (the runner: directories, inputs, start weights, composing and checking every stage, the lock and
log), ``training`` (a training stage: skip, resume, refuse or retrain), ``reuse`` (a recipe stage that is not a
training run: reused while its record matches), ``signals`` (a stop signal ends the process in one line), ``record``
(``stage_complete.json``), ``start`` (``stage_start.json``: what a stage started from, by content hash), ``chain``
(a chain's stages), ``process`` (which rank writes; the accelerate reset between stages)."""

from recipes.stages.chain import chain_stages, stage_sources  # noqa: F401
from recipes.stages.runner import StageRunner  # noqa: F401
