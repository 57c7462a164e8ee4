"""Composing ``conf/`` into typed configs through Hydra: the root schemas (:data:`trainer.config.roots.SCHEMAS`)
and every generation backend's typed ``generation`` node stored in Hydra's ConfigStore (group
``generation_schema``: ``conf/generation/<name>.yaml`` extends ``/generation_schema/<name>@_here_``), so that
``conf/<x>.yaml`` composes against them; and :func:`compose`, a stage's config composed as its command line
would compose it."""

from __future__ import annotations

from trainer.config.roots import SCHEMAS
from selectrust.generation.backends import loadable_backend_names


def register_schema(name: str, node: type) -> None:
    """Add a root schema (a package's own entry point, e.g. a demo) to :data:`SCHEMAS` and Hydra's
    ConfigStore, so that a ``conf/<x>.yaml`` naming it composes and ``--help`` finds it. The same schema again is a
    no-op; another under a name in use is a ValueError naming the one there."""
    SCHEMAS.register(name, node)
    register_schemas()


def register_schemas() -> None:
    """Store the root schemas of :data:`SCHEMAS` (those an installed plugin declares but cannot import left out)
    and each generation backend's schema (:func:`~trainer.config.schemas.generation_schema`) in Hydra's
    ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore  # deferred: imports hydra

    from trainer.config.schemas import generation_schema  # deferred: import cycle with trainer.config.schemas

    cs = ConfigStore.instance()
    for name in SCHEMAS.loadable():
        cs.store(name=name, node=SCHEMAS.get(name))
    for name in loadable_backend_names():
        cs.store(group="generation_schema", name=name, node=generation_schema(name))


def compose(config_name: str, overrides: list[str]):
    """A recipe's config composed like ``python recipes/<config_name>.py <overrides>`` would compose it, inside the
    Hydra context the running entry point opened (``@hydra.main``): what the entry points that run stages
    (``recipes/chain.py``, ``recipes/demo.py``, ``recipes/distill.py``'s pipelines) hand the stage runner."""
    from hydra import compose as hydra_compose  # deferred: imports hydra

    return hydra_compose(config_name=config_name, overrides=list(overrides))
