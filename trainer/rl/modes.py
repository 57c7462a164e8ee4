"""GRPO's single-turn rollout modes by name (``algo.rollout_mode``): :data:`MODES`, a registry with its own
entry-point group, ``selectrust.rollout_modes`` (an entry point names a :class:`~trainer.rl.rollout_modes.SingleTurnMode`
subclass). :class:`~trainer.rl.rollout_modes.EnvironmentMode` is ``algo.env``'s, whatever the name. The config's
choice is ``trainer.algos.choices.ROLLOUT_MODES``, the same names torch-free (a test holds them equal). A module of
its own, above both modes' modules: ``paired_rollouts`` subclasses ``rollout_modes``' ``SingleTurnMode``."""

from __future__ import annotations

from selectrust.core.errors import ConfigError
from selectrust.core.plugins import Registry

from .paired_rollouts import PairedContextMode
from .rollout_modes import SingleTurnMode


def _single_turn_mode(name: str, obj: object) -> type[SingleTurnMode]:
    if not (isinstance(obj, type) and issubclass(obj, SingleTurnMode)):
        raise ConfigError(f"algo.rollout_mode={name!r}: not a SingleTurnMode subclass (got {obj!r})")
    return obj


MODES: Registry[type[SingleTurnMode]] = Registry("rollout mode", "selectrust.rollout_modes", {
    "single_turn": SingleTurnMode,
    "paired_context": PairedContextMode,
}, accept=_single_turn_mode, error=ConfigError)
