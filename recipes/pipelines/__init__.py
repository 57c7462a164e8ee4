"""The distillation pipelines behind ``python recipes/distill.py``: ``taste_distill`` (``pipeline.kind=taste``) and
``opsd`` (``pipeline.kind=opsd``). Each is a declared list of stages run by the stage runner (``recipes/stages/``),
so they sit above the recipes they run, beside it; the distillation trainer itself (its views, step and
evaluation) is ``trainer/distill/``."""

from selectrust.core.errors import ConfigError
from selectrust.core.plugins import Registry

from .opsd import OpsdPipeline
from .taste_distill import DistillPipeline


def _pipeline(name: str, obj: object) -> type:
    if not (isinstance(obj, type) and callable(getattr(obj, "run", None))):
        raise ConfigError(f"pipeline.kind={name!r}: not a pipeline class with a run() method (got {obj!r})")
    return obj


PIPELINES: Registry[type] = Registry("distillation pipeline", "selectrust.distill_pipelines", {
    "taste": DistillPipeline,
    "opsd": OpsdPipeline,
}, accept=_pipeline, error=ConfigError)
"""The pipeline of ``pipeline.kind`` (a class taking ``(cfg, compose=, runners=, overrides=)`` with ``run() ->
summary``): a registry with its own entry-point group, so a package adds a pipeline without editing the recipe."""
