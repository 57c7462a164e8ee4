"""The registries of GRPO's named callables (``algo.env``: :data:`trainer.rl.envs.ENVIRONMENTS`; ``algo.reward``:
:data:`trainer.rl.rewards.REGISTRY`): :class:`selectrust.core.plugins.Registry` instances whose errors are the config's
(:class:`trainer.config.ConfigError`, naming ``algo.<key>``)."""

from __future__ import annotations

from typing import Callable

from selectrust.core.plugins import Registry, load_failure


def config_error(message: str) -> Exception:
    """A :class:`trainer.config.ConfigError` (imported on first use: the config package is not needed to import
    the registries)."""
    from trainer.config import ConfigError

    return ConfigError(message)


def callable_registry(kind: str, key: str, group: str, builtin: dict[str, str]) -> Registry[Callable]:
    """A registry of callables named by ``algo.<key>``: ``builtin`` (``name -> "module:attribute"``), registered in
    code, or the entry points of ``group``. What a name loads must be callable; an entry point that fails to import
    and an unknown name are :func:`config_error`\\ s naming ``algo.<key>=<name>``."""
    def accept(name: str, obj: object) -> Callable:
        if not callable(obj):
            raise config_error(f"algo.{key}={name!r}: {registry.source(name)!r} is not callable (got {obj!r})")
        return obj

    def broken(name: str, value: str, e: Exception) -> Exception:
        return config_error(f"algo.{key}={name!r}: {load_failure(value, group, e)}")

    registry: Registry[Callable] = Registry(kind, group, builtin, accept=accept, error=config_error, broken=broken)
    return registry
