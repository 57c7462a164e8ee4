"""The evaluation families, by name: the one place that knows which families exist.

A family is a :class:`~eval_hooks.families.base.Family` (items, scoring, metrics, headline, report section,
run) in its own package ``eval_hooks/families/<name>/``. Nothing outside this registry chooses code by a
family's name: :func:`eval_hooks.metrics.compute_metrics`, :func:`eval_hooks.report.write_report`,
:func:`eval_hooks.run_matched_eval`, the CLI and the trainers all ask :func:`get_family`.

Families come from three places, looked up in this order:

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
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import MISSING, Field, field, fields
from typing import TYPE_CHECKING, Any

from ..io import DataError
from .base import Family

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

ENTRY_POINT_GROUP = "selectrust.families"

BUILTIN: dict[str, str] = {
    "mist": "eval_hooks.families.mist:MistFamily",
    "box2": "eval_hooks.families.box2:Box2Family",
    "taste": "eval_hooks.families.taste:TasteFamily",
    "med": "eval_hooks.families.med:MedFamily",
}

_loaded: dict[str, Family] = {}  # built-in and entry-point families, once imported
_registered: dict[str, Family] = {}  # register_family
_entry_points: dict[str, EntryPoint] | None = None  # read once, lazily


def register_family(family: Family) -> Family:
    """Make ``family`` (an instance) available under ``family.name``; returns it. Registering the same object
    again is a no-op; another family under a name already in use is an error."""
    if not isinstance(family, Family) or not family.name:
        raise TypeError(f"register_family needs a Family instance with a name, got {family!r}")
    known = _registered.get(family.name)
    if known is family:
        return family
    if known is not None or family.name in BUILTIN:
        raise ValueError(f"family {family.name!r} is already registered")
    _registered[family.name] = family
    return family


def unregister_family(name: str) -> None:
    """Remove a family added with :func:`register_family` (tests, notebooks)."""
    _registered.pop(name, None)


def entry_points(group: str):
    """The installed packages' entry points of ``group`` (``importlib.metadata``, imported on first use)."""
    from importlib.metadata import entry_points as installed

    return installed(group=group)


def _discovered() -> dict[str, EntryPoint]:
    global _entry_points
    if _entry_points is None:  # the first distribution on sys.path wins a name, as for imports
        _entry_points = {ep.name: ep for ep in reversed(list(entry_points(group=ENTRY_POINT_GROUP)))}
    return _entry_points


def family_names() -> list[str]:
    """Every known family: the built-in ones in :data:`BUILTIN` order, then those registered in code, then
    those of installed packages' entry points (sorted)."""
    names = list(BUILTIN) + [n for n in _registered if n not in BUILTIN]
    return names + sorted(n for n in _discovered() if n not in names)


def _load(name: str, ep: EntryPoint) -> Family:
    try:
        obj = ep.load()
        family = obj() if isinstance(obj, type) else obj
    except Exception as e:
        raise DataError(f"cannot load family {name!r} from {ep.value!r} ({type(e).__name__}: {e})",
                        field="family") from e
    if not isinstance(family, Family) or family.name != name:
        raise DataError(f"{ep.value!r} is not a Family named {name!r} (got {family!r})", field="family")
    return family


def get_family(name: str) -> Family:
    """The family called ``name``; :class:`DataError` (field ``family``) listing the known ones otherwise."""
    if name in _registered:
        return _registered[name]
    if name not in _loaded:
        from importlib.metadata import EntryPoint

        value = BUILTIN.get(name)
        ep = EntryPoint(name, value, ENTRY_POINT_GROUP) if value else _discovered().get(name)
        if ep is None:
            raise DataError(f"unknown family {name!r}", field="family", accepted=" | ".join(family_names()))
        _loaded[name] = _load(name, ep)
    return _loaded[name]


def settings_fields(taken: Iterable[str] = ()) -> list[tuple[str, Any, Field]]:
    """Every family's own settings as fields of the ``eval`` config group, in :func:`family_names` order:
    ``(key, type, dataclasses.Field)`` for :func:`dataclasses.make_dataclass`. A family's settings are one
    section ``<name>`` typed with its settings dataclass, or, with ``flat_settings``, each of their fields at
    the top of the group. ``taken``: the group's own keys. A key that two families, or a family and the group,
    would both use is a ValueError naming both."""
    owner = {key: "the eval group itself" for key in taken}
    out: list[tuple[str, Any, Field]] = []
    for name in family_names():
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
    for name in family_names():
        family = get_family(name)
        if family.settings is None:
            continue
        keys = [f.name for f in fields(family.settings)] if family.flat_settings else [name]
        if all(hasattr(eval_cfg, k) for k in keys):
            out[name] = family.settings_from(eval_cfg)
    return out


class _Families(Mapping):
    """``FAMILIES[name]`` is :func:`get_family`; iterating gives :func:`family_names`."""

    def __getitem__(self, name: str) -> Family:
        try:
            return get_family(name)
        except DataError:
            raise KeyError(name) from None

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in family_names()

    def __iter__(self) -> Iterator[str]:
        return iter(family_names())

    def __len__(self) -> int:
        return len(family_names())

    def __repr__(self) -> str:
        return f"FAMILIES({family_names()})"


FAMILIES: Mapping[str, Family] = _Families()

__all__ = ["BUILTIN", "ENTRY_POINT_GROUP", "FAMILIES", "Family", "family_names", "family_settings", "get_family",
           "register_family", "settings_fields", "unregister_family"]
