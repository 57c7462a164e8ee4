"""The registries of GRPO's named callables (``algo.env``: :data:`trainer.rl.envs.ENVIRONMENTS`; ``algo.reward``:
:data:`trainer.rl.rewards.REWARDS`): :class:`selectrust.core.plugins.Registry` instances that also take an import
path ``pkg.module:attribute`` as a name, and whose errors are the config's (:class:`selectrust.core.errors.ConfigError`,
naming ``algo.<key>``)."""

from __future__ import annotations

from typing import Callable, Mapping

from selectrust.core.errors import ConfigError
from selectrust.core.plugins import Registry


def callable_registry(kind: str, key: str, group: str, builtin: Mapping[str, Callable], *,
                      unknown: Callable[[str, list[str]], Exception],
                      bad_path: Callable[[str, Exception | None], Exception]) -> Registry[Callable]:
    """A registry of callables named by ``algo.<key>``: ``builtin`` (``name -> callable``), registered in code, the
    entry points of ``group``, or an import path ``pkg.module:attribute``. What a name loads must be callable (a
    broken entry point is the registry's ``PluginError``, naming it); ``unknown(name, known)``
    is the error of a name known nowhere, ``bad_path(name, exc)`` that of an import path that does not import
    (``exc``) or names something not callable (``exc`` None)."""
    def accept(name: str, obj: object) -> Callable:
        if not callable(obj):
            if ":" in name and name not in registry:  # an import path
                raise bad_path(name, None)
            raise ConfigError(f"algo.{key}={name!r}: {registry.source(name)!r} is not callable (got {obj!r})")
        return obj

    registry: Registry[Callable] = Registry(kind, group, builtin, accept=accept, error=ConfigError, unknown=unknown,
                                            paths=bad_path)
    return registry
