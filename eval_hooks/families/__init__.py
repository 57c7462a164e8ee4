"""The evaluation families, by name: the one place that knows which families exist.

A family is a :class:`~eval_hooks.families.base.Family` (items, scoring, metrics, headline, report section,
run) in its own package ``eval_hooks/families/<name>/``. Nothing outside this registry chooses code by a
family's name: :func:`eval_hooks.compute_metrics`, :func:`eval_hooks.report.write_report`,
:func:`eval_hooks.run_matched_eval`, the CLI and the trainers all ask :func:`get_family`.

Families come from three places (:data:`FAMILIES`, an :class:`selectrust.core.plugins.Registry`), looked up in this order:

- :data:`BUILTIN`: one line per family of this repository, ``name -> "module:attribute"``;
- :func:`register_family`, in code;
- the entry-point group :data:`ENTRY_POINT_GROUP` of installed packages, so that a separate package adds a
  family without this one importing it::

      [project.entry-points."selectrust.families"]
      myfam = "mypackage.myfam:MyFamily"

The group is read once, the first time the names of all families are needed (``FAMILIES``, an unknown
name); a family's module is imported when that family is used, or when the trainer's config schema is built
(:func:`settings_fields`). The attribute named may be a ``Family`` subclass (instantiated without arguments)
or an instance. Input formats of the built-in families: ``eval_hooks/FORMATS.md``; how to add one:
docs/architecture.md.

A family's own settings are declared with it (``Family.settings``, a dataclass) and composed from here into
the ``eval`` config group (:func:`settings_fields`): the section ``eval.<name>``, or keys at the top of the
group for a family with ``flat_settings``.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from dataclasses import MISSING, Field, field, fields
from typing import Any

from selectrust.core.io import DataError
from selectrust.core.plugins import Registry
from .base import Family

ENTRY_POINT_GROUP = "selectrust.families"

BUILTIN: dict[str, str] = {
    "mist": "eval_hooks.families.mist:MistFamily",
    "box2": "eval_hooks.families.box2:Box2Family",
    "taste": "eval_hooks.families.taste:TasteFamily",
    "med": "eval_hooks.families.med:MedFamily",
    "nq_swap": "eval_hooks.families.nq_swap:NqSwapFamily",
}


def _accept(name: str, obj: object) -> Family:
    """What a built-in line or an entry point names -> the family: a ``Family`` subclass is instantiated without
    arguments; anything but a ``Family`` called ``name`` is a :class:`DataError` (field ``family``; for a plugin,
    the registry raises a ``PluginError`` naming it from this, or from the constructor's own error)."""
    family = obj() if isinstance(obj, type) else obj
    if not isinstance(family, Family) or family.name != name:
        raise DataError(f"{FAMILIES.source(name)!r} is not a Family named {name!r} (got {family!r})", field="family")
    return family


def _unknown(name: str, known: list[str]) -> DataError:
    return DataError(f"unknown family {name!r}", field="family", accepted=" | ".join(known))


#: ``FAMILIES[name]`` is :func:`get_family`; iterating gives :func:`family_names` less the broken plugins.
FAMILIES: Registry[Family] = Registry("family", ENTRY_POINT_GROUP, BUILTIN, accept=_accept,
                                      error=lambda message: DataError(message, field="family"), unknown=_unknown,
                                      component=Family)

#: ``register_family(family)``: make ``family`` (an instance) available under ``family.name`` (the same object again
#: is a no-op; another family under a name in use is an error); ``unregister_family(name)`` removes it (tests,
#: notebooks); ``family_names()``: the built-in ones in :data:`BUILTIN` order, then those registered in code, then the
#: entry points (sorted); ``get_family(name)``: the family, :class:`DataError` (field ``family``) listing the known
#: ones otherwise.
register_family, unregister_family, family_names, get_family = (FAMILIES.add, FAMILIES.unregister, FAMILIES.names,
                                                                FAMILIES.get)


def settings_fields(taken: Iterable[str] = ()) -> list[tuple[str, Any, Field]]:
    """Every family's own settings as fields of the ``eval`` config group, in :func:`family_names` order:
    ``(key, type, dataclasses.Field)`` for :func:`dataclasses.make_dataclass`. A family's settings are one
    section ``<name>`` typed with its settings dataclass, or, with ``flat_settings``, each of their fields at
    the top of the group. ``taken``: the group's own keys. A key that two families, or a family and the group,
    would both use is a ValueError naming both."""
    owner = {key: "the eval group itself" for key in taken}
    out: list[tuple[str, Any, Field]] = []
    for name in FAMILIES:  # a broken plugin left out (one warning line): only a command using it fails
        family = get_family(name)
        if family.settings is None:
            continue
        if family.flat_settings:
            hints = typing.get_type_hints(family.settings)
            entries = [(f.name, hints[f.name], _copy(f)) for f in fields(family.settings)]
        else:
            entries = [(name, family.settings, field(default_factory=family.settings,
                                                     metadata={"help": f"The settings of family {name}."}))]
        for key, _, _ in entries:
            if key in owner:
                raise ValueError(f"eval.{key}: family {name!r} declares a setting that {owner[key]} already has")
            owner[key] = f"family {name!r}"
        out += entries
    return out


def _copy(f: Field) -> Field:
    """A fresh field with ``f``'s default and help (a Field object belongs to the one dataclass it was made in)."""
    default = {"default": f.default} if f.default is not MISSING else {"default_factory": f.default_factory}
    return field(**default, metadata=f.metadata)


def family_settings(eval_cfg: Any) -> dict[str, Any]:
    """``{name: settings}`` (``Family.settings_from``) of every family with settings whose keys the ``eval``
    config group ``eval_cfg`` holds: all of them in a config composed after they were registered (a family
    registered in code later has none there)."""
    out = {}
    for name in FAMILIES:  # a broken plugin left out
        family = get_family(name)
        if family.settings is None:
            continue
        keys = [f.name for f in fields(family.settings)] if family.flat_settings else [name]
        if all(hasattr(eval_cfg, k) for k in keys):
            out[name] = family.settings_from(eval_cfg)
    return out


__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "FAMILIES", "Family", "family_names", "family_settings", "get_family",
           "register_family", "settings_fields", "unregister_family"]
