"""The one registry of named components: every kind of component that code picks by a name (from the config, a
data path, a command line) is a :class:`Registry`: generation backends, evaluation families, answer types, data
sources, DPO-style losses, multi-turn environments, rewards, root config schemas, the recipes a stage may run, tiny
model presets, GGUF packages, the demos and the real demo's arms. A kind's components come from three places, looked
up in this order:

- built-in ones, ``name -> component`` (the component itself, imported plainly by the module that declares the
  kind), or ``name -> "module:attribute"`` where the kind must list and check its names without importing the
  component's module (the DPO losses: torch), which is imported the first time the name is used;
- ones registered in code (:meth:`Registry.register`, or :meth:`Registry.add` for a component that carries its
  own ``name``);
- the entry points of installed packages, one entry-point group per kind (``selectrust.<kind>``), read once, the
  first time a name is not built in or registered (:func:`entry_points`, the repository's one reader of package
  metadata)::

      [project.entry-points."selectrust.dpo_losses"]
      ipo = "mypackage.losses:IPO"

A kind may also take an import path ``module:attribute`` as a name (``paths``: GRPO's environments and rewards).
How a kind checks a component (``accept``, also run on :meth:`Registry.register`), and which exceptions it raises
for an unknown, a broken or a bad-path name, is the kind's own (``error``, ``unknown``, ``broken``, ``paths``), so
each keeps its error type and message. The lookups every kind shares are methods here (:meth:`Registry.add`,
:meth:`Registry.unregister`, :meth:`Registry.names`, :meth:`Registry.get`, :meth:`Registry.loadable`); a kind's
public functions (``register_family``, ``get_backend``, ...) are these methods, bound."""

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


def where(component: object) -> str | None:
    """``"module:qualname"`` of a class or function (what a message names it by); None for anything else."""
    module, qualname = getattr(component, "__module__", None), getattr(component, "__qualname__", None)
    return f"{module}:{qualname}" if isinstance(module, str) and isinstance(qualname, str) else None


class Registry(Mapping, Generic[T]):
    """``registry[name]`` is :meth:`get` (``KeyError`` when unknown); iterating gives :meth:`names`.

    - ``kind``: the words of messages ("generation backend"); ``group``: the entry-point group;
      ``builtin``: ``{name: component or "module:attribute"}`` in the order :meth:`names` lists them.
    - ``accept(name, obj) -> component`` checks what a built-in line, an entry point, an import path or
      :meth:`register` gives and returns the component (e.g. instantiates a class); it raises the kind's own error
      for a wrong object.
    - ``error(message) -> Exception``: the exception of an unknown name.
    - ``unknown(name, known) -> Exception`` (optional): replaces ``error("unknown <kind> ...; known: a | b")``
      for a name that is nowhere; ``known`` is :meth:`names`.
    - ``broken(name, value, exc) -> Exception`` (optional): the exception raised (from ``exc``) when importing
      ``value`` (``"module:attribute"``) fails; without it the import's own exception propagates.
    - ``component`` (optional): the type of a kind whose components carry their own ``name`` (:meth:`add`).
    - ``paths(name, exc) -> Exception`` (optional): the kind also takes an import path ``module:attribute`` as a
      name (one known nowhere else); the exception raised (from ``exc``, an ``ImportError`` or ``AttributeError``)
      when it does not import."""

    def __init__(self, kind: str, group: str, builtin: Mapping[str, object], *, accept: Callable[[str, object], T],
                 error: Callable[[str], Exception],
                 unknown: Callable[[str, list[str]], Exception] | None = None,
                 broken: Callable[[str, str, Exception], Exception] | None = None,
                 component: type | None = None,
                 paths: Callable[[str, Exception], Exception] | None = None):
        self.kind, self.group, self.builtin = kind, group, dict(builtin)
        self.accept, self.error, self.unknown, self.broken = accept, error, unknown, broken
        self.component, self.paths = component, paths
        self.loaded: dict[str, T] = {}  # built-in, entry-point and import-path components, once accepted
        self.registered: dict[str, T] = {}  # register()
        self.installed: dict[str, EntryPoint] | None = None  # the group, read once
        self.failed: set[str] = set()  # names whose entry point failed to import (:meth:`loadable` leaves them out)

    def register(self, name: str, component: T) -> T:
        """Make ``component`` (checked by ``accept``) available under ``name``; returns it. The same object again is
        a no-op; a built-in name, or another object under a name in use (registered, or an entry point already
        loaded), is an error naming the one there."""
        known = self.registered.get(name, self.loaded.get(name))
        if known is component and name not in self.builtin:
            return component
        if known is not None or name in self.builtin:
            if known is None and not isinstance(self.builtin[name], str):
                known = self.builtin[name]
            there = where(known)
            raise ValueError(f"{self.kind} {name!r} is already registered" + (f" ({there.replace(':', '.')})"
                                                                              if there else ""))
        self.registered[name] = self.accept(name, component)
        return self.registered[name]

    def add(self, component: T) -> T:
        """:meth:`register` ``component`` under its own ``name`` (a kind declared with ``component``, its type);
        TypeError for anything else."""
        cls = self.component
        if cls is None or not isinstance(component, cls) or not getattr(component, "name", None):
            what = "a component" if cls is None else ("an " if cls.__name__[0] in "AEIOU" else "a ") + cls.__name__
            raise TypeError(f"registering a {self.kind} needs {what} with a name, got {component!r}")
        return self.register(component.name, component)

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

    def loadable(self) -> list[str]:
        """:meth:`names` less the installed entry points whose module cannot be imported (those fail, in the kind's
        ``broken`` error, only when chosen): what a schema or a message lists, so that a broken plugin breaks no
        command that does not choose it."""
        out = []
        for name in self.names():
            try:
                self.get(name)
            except Exception:  # noqa: BLE001 - a failed import is left out; any other error is the kind's to raise
                if name not in self.failed:
                    raise
                continue
            out.append(name)
        return out

    def source(self, name: str) -> str | None:
        """Where ``name`` loads from: ``"module:attribute"`` of a built-in line (or of a built-in class or function),
        of an entry point, or the import path itself; None for a component registered in code or an unknown name."""
        if name in self.builtin:
            value = self.builtin[name]
            return value if isinstance(value, str) else where(value)
        if name in self.registered:
            return None
        ep = self.discovered().get(name)
        if ep is not None:
            return ep.value
        return name if self.paths is not None and ":" in name else None

    def get(self, name: str) -> T:
        """The component called ``name``; ``unknown`` (or ``error``) listing the known ones otherwise."""
        if not isinstance(name, str):
            raise self._unknown(name)
        if name in self.registered:
            return self.registered[name]
        if name not in self.loaded:
            self.loaded[name] = self.accept(name, self._load(name))
        return self.loaded[name]

    def _unknown(self, name) -> Exception:
        if self.unknown is not None:
            return self.unknown(name, self.names())
        return self.error(f"unknown {self.kind} {name!r}; known: {' | '.join(self.names())}")

    def _load(self, name: str) -> object:
        """What ``name`` names, before ``accept``: a built-in component, or the import of a built-in line, an
        entry point or an import path."""
        value = self.builtin.get(name)
        if value is not None and not isinstance(value, str):
            return value
        if value is None and name not in self.discovered() and self.paths is not None and ":" in name:
            from importlib import import_module

            module, _, attribute = name.partition(":")
            try:
                return getattr(import_module(module), attribute)
            except (ImportError, AttributeError) as e:
                raise self.paths(name, e) from e
        from importlib.metadata import EntryPoint

        ep = EntryPoint(name, value, self.group) if value else self.discovered().get(name)
        if ep is None:
            raise self._unknown(name)
        try:
            return ep.load()
        except Exception as e:  # noqa: BLE001 - any import error of the component, named by the kind
            self.failed.add(name)
            if self.broken is None:
                raise
            raise self.broken(name, ep.value, e) from e

    def __getitem__(self, name: str) -> T:
        if name not in self:
            raise KeyError(name)
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is known (an import path is not); the group is read only for a name neither built in nor
        registered."""
        return isinstance(name, str) and (name in self.builtin or name in self.registered or name in self.discovered())

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"{self.kind} registry {self.names()}"
