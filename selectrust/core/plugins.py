"""The one registry of named components: every kind of component that code picks by a name from the config
(generation backends, evaluation families, data sources, DPO-style losses, multi-turn environments, rewards) is a
:class:`Registry`. A kind's components come from three places, looked up in this order:

- built-in ones, ``name -> "module:attribute"`` (the module is imported the first time the name is used, so a
  torch-free caller such as the config schema can list and check the names without importing it);
- ones registered in code (:meth:`Registry.register`);
- the entry points of installed packages, one entry-point group per kind (``selectrust.<kind>``), read once, the
  first time a name is not built in or registered (:func:`entry_points`, the repository's one reader of package
  metadata)::

      [project.entry-points."selectrust.dpo_losses"]
      ipo = "mypackage.losses:IPO"

How a kind checks what a name loads, and which exceptions it raises for an unknown or a broken name, is the
kind's own (``accept``, ``error``, ``unknown``, ``broken``), so each keeps its error type and message."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Callable, Generic, TypeVar

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

T = TypeVar("T")


def entry_points(group: str):
    """The installed packages' entry points of ``group`` (``importlib.metadata``, imported on first use): the one
    place that reads them (tests monkeypatch this function to install a component)."""
    from importlib.metadata import entry_points as installed

    return installed(group=group)


def load_failure(value: str, group: str, exc: Exception) -> str:
    """The words every kind's ``broken`` uses for an entry point that failed to import (after its own prefix)."""
    return f"entry point {value!r} (group {group}) failed to load: {type(exc).__name__}: {exc}"


class Registry(Mapping, Generic[T]):
    """``registry[name]`` is :meth:`get` (``KeyError`` when unknown); iterating gives :meth:`names`.

    - ``kind``: the words of messages ("generation backend"); ``group``: the entry-point group;
      ``builtin``: ``{name: "module:attribute"}`` in the order :meth:`names` lists them.
    - ``accept(name, obj) -> component`` checks what a built-in line or an entry point names and returns the
      component (e.g. instantiates a class); it raises the kind's own error for a wrong object.
    - ``error(message) -> Exception``: the exception of an unknown name.
    - ``unknown(name, known) -> Exception`` (optional): replaces ``error("unknown <kind> ...; known: a | b")``
      for a name that is nowhere; ``known`` is :meth:`names`.
    - ``broken(name, value, exc) -> Exception`` (optional): the exception raised (from ``exc``) when importing
      ``value`` (``"module:attribute"``) fails; without it the import's own exception propagates."""

    def __init__(self, kind: str, group: str, builtin: dict[str, str], *, accept: Callable[[str, object], T],
                 error: Callable[[str], Exception],
                 unknown: Callable[[str, list[str]], Exception] | None = None,
                 broken: Callable[[str, str, Exception], Exception] | None = None):
        self.kind, self.group, self.builtin = kind, group, builtin
        self.accept, self.error, self.unknown, self.broken = accept, error, unknown, broken
        self.loaded: dict[str, T] = {}  # built-in and entry-point components, once imported
        self.registered: dict[str, T] = {}  # register()
        self.installed: dict[str, EntryPoint] | None = None  # the group, read once

    def register(self, name: str, component: T) -> T:
        """Make ``component`` available under ``name``; the same object again is a no-op, another one under a name
        in use is an error."""
        known = self.registered.get(name)
        if known is component:
            return component
        if known is not None or name in self.builtin:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self.registered[name] = component
        return component

    def unregister(self, name: str) -> None:
        """Remove a component added with :meth:`register` (tests, notebooks)."""
        self.registered.pop(name, None)

    def discovered(self) -> dict[str, EntryPoint]:
        """``{name: EntryPoint}`` of the group, read on the first call."""
        if self.installed is None:  # the first distribution on sys.path wins a name, as for imports
            self.installed = {ep.name: ep for ep in reversed(list(entry_points(group=self.group)))}
        return self.installed

    def names(self) -> list[str]:
        """The built-in components in their order, then those registered in code, then the entry points (sorted)."""
        names = list(self.builtin) + [n for n in self.registered if n not in self.builtin]
        return names + sorted(n for n in self.discovered() if n not in names)

    def source(self, name: str) -> str | None:
        """The ``"module:attribute"`` that ``name`` loads from (a built-in line or an entry point); None for a
        component registered in code or an unknown name."""
        if name in self.builtin:
            return self.builtin[name]
        ep = None if name in self.registered else self.discovered().get(name)
        return None if ep is None else ep.value

    def get(self, name: str) -> T:
        """The component called ``name``; ``unknown`` (or ``error``) listing the known ones otherwise."""
        if name in self.registered:
            return self.registered[name]
        if name not in self.loaded:
            from importlib.metadata import EntryPoint

            value = self.builtin.get(name)
            ep = EntryPoint(name, value, self.group) if value else self.discovered().get(name)
            if ep is None:
                if self.unknown is not None:
                    raise self.unknown(name, self.names())
                raise self.error(f"unknown {self.kind} {name!r}; known: {' | '.join(self.names())}")
            try:
                obj = ep.load()
            except Exception as e:  # noqa: BLE001 - any import error of the component, named by the kind
                if self.broken is None:
                    raise
                raise self.broken(name, ep.value, e) from e
            self.loaded[name] = self.accept(name, obj)
        return self.loaded[name]

    def __getitem__(self, name: str) -> T:
        if name not in self:
            raise KeyError(name)
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is known; the group is read only for a name neither built in nor registered."""
        return isinstance(name, str) and (name in self.builtin or name in self.registered or name in self.discovered())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"{self.kind} registry {self.names()}"
