"""The typed settings an entry point runs on, built once: Hydra composes ``conf/<x>.yaml`` onto a root schema of
:mod:`trainer.config.roots` (a misspelt key or a value outside a choice's set fails there), the recipe's
``validate_<x>`` checks what composition cannot, and :func:`to_settings` turns the checked config into the root
schema's dataclass instance (``OmegaConf.to_object``: choice fields are :class:`~selectrust.core.settings.Choice`
members, every interpolation resolved). Below the entry point functions take that object, or the group of it they
need (``settings.model``, ``settings.algo``), or plain values: never a ``DictConfig``
(``tests/trainer/config/test_settings.py`` keeps it so).

The settings hold every value resolved, so their plain values are the composed config's: a run's ``config.yaml``
(``trainer/runtime/run.py``) is ``OmegaConf.to_yaml(OmegaConf.create(dataclasses.asdict(settings)))``, byte for byte the
YAML of the composed config, and the resume check compares ``asdict(settings)`` with it. :func:`to_config` is the way
back to a structured config, checked against the schema again."""

from __future__ import annotations

from typing import Any, Callable
from omegaconf import OmegaConf


def to_settings(cfg: Any, validate: Callable[..., None] | None = None, **checks: Any) -> Any:
    """``cfg`` (a composed config, or settings already typed) validated by ``validate(cfg, **checks)`` (a
    ``validate_<recipe>`` of :mod:`trainer.config.validation`; raises :class:`~trainer.config.ConfigError` naming
    the key) and converted into its root schema's dataclass instance. A mandatory value left unset
    (``data.train_path=???``) raises omegaconf's ``MissingMandatoryValue`` naming its key, here, before any model
    or data loads."""
    node = cfg if OmegaConf.is_config(cfg) else to_config(cfg)
    if validate is not None:
        validate(node, **checks)
    return OmegaConf.to_object(node)


def to_config(settings: Any):
    """``settings`` (a root schema's dataclass instance) as a structured ``DictConfig`` again (every value checked
    against the schema): what :func:`to_settings` validates when handed settings already typed."""
    return OmegaConf.structured(settings)
