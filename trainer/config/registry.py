"""The registry of root schemas: :data:`SCHEMAS` (name in ``conf/<x>.yaml``'s defaults list -> root schema)
and their registration with Hydra's ConfigStore, with the typed ``generation`` node of every generation backend
(group ``generation_schema``: ``conf/generation/<name>.yaml`` extends ``/generation_schema/<name>@_here_``)."""

from __future__ import annotations

from trainer.config.roots import (ChainRunConfig, DistillRunConfig, DPORunConfig, EvaluateRunConfig, GRPORunConfig,
                                  MergeRunConfig, MineRunConfig, SFTRunConfig)


SCHEMAS = {
    "chain_schema": ChainRunConfig,
    "merge_schema": MergeRunConfig,
    "dpo_schema": DPORunConfig,
    "sft_schema": SFTRunConfig,
    "grpo_schema": GRPORunConfig,
    "distill_schema": DistillRunConfig,
    "evaluate_schema": EvaluateRunConfig,
    "mine_schema": MineRunConfig,
}


def register_schema(name: str, node: type) -> None:
    """Add a root schema (a package's own entry point, e.g. a demo) to :data:`SCHEMAS` and Hydra's
    ConfigStore, so that a ``conf/<x>.yaml`` naming it composes and ``--help`` finds it."""
    known = SCHEMAS.get(name)
    if known is not None and known is not node:
        raise ValueError(f"schema {name!r} is already registered ({known.__module__}.{known.__qualname__})")
    SCHEMAS[name] = node
    register_schemas()


def register_schemas() -> None:
    """Register the root schemas of :data:`SCHEMAS` and each generation backend's schema
    (:func:`~trainer.config.schemas.generation_schema`) with Hydra's ConfigStore (idempotent)."""
    from hydra.core.config_store import ConfigStore

    from selectrust.generation.backends.registry import loadable_backend_names
    from trainer.config.schemas import generation_schema

    cs = ConfigStore.instance()
    for name, node in SCHEMAS.items():
        cs.store(name=name, node=node)
    for name in loadable_backend_names():
        cs.store(group="generation_schema", name=name, node=generation_schema(name))
