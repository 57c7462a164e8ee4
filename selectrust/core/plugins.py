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
- the entry points of installed packages (plugins), one entry-point group per kind (``selectrust.<kind>``), read
  once, the first time a name is not built in or registered, or the names are listed (:func:`entry_points`, the
  repository's one reader of package metadata)::

      [project.entry-points."selectrust.dpo_losses"]
      ipo = "mypackage.losses:IPO"

A kind may also take an import path ``module:attribute`` as a name (``paths``: GRPO's environments and rewards).
How a kind checks a component (``accept``, also run on :meth:`Registry.register`) and the exception of an unknown
or a bad-path name are the kind's own (``error``, ``unknown``, ``paths``).

What a plugin may break is decided here, once, for every kind (the error contract of every command line):

- a broken plugin (its module missing, its import raising, or what it names refused by ``accept``: the wrong kind
  of object, a constructor that fails) is a :class:`~selectrust.core.errors.PluginError` (a ``DataError``: one
  line, exit 2) naming the plugin, its entry-point group and distribution and the fix, raised only where that
  name is used (:meth:`Registry.get`);
- listings skip it, with one warning line on stderr (:meth:`Registry.loadable`, also what iterating a registry
  gives: the config's choices, the schemas, ``--help``), so that a broken plugin breaks no command that does not
  choose it;
- an entry point named like a built-in component is ignored (the built-in one wins), and of several
  distributions declaring one name the project's own (:data:`PROJECT`) wins, else the first on ``sys.path``: each
  with one warning line.

The lookups every kind shares are methods here (:meth:`Registry.add`, :meth:`Registry.unregister`,
:meth:`Registry.names`, :meth:`Registry.get`, :meth:`Registry.loadable`); a kind's public functions
(``register_family``, ``get_backend``, ...) are these methods, bound."""

from __future__ import annotations

import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Callable, Generic, TypeVar

from selectrust.core.errors import PluginError

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

T = TypeVar("T")

#: The distribution of this repository (pyproject.toml's ``name``): its entry points win a name another
#: distribution also declares.
PROJECT = "selectrust"

_REGISTRIES: list[Registry] = []  # every registry made, for :func:`broken_plugin`


def entry_points(group: str):
    """The installed packages' entry points of ``group`` (``importlib.metadata``, imported on first use): the one
    place that reads them (tests monkeypatch this function to install a component)."""
    from importlib.metadata import entry_points as installed  # deferred: tests patch it

    return installed(group=group)


def warn(line: str) -> None:
    """One warning line on stderr (a broken plugin left out of a listing, a name clash)."""
    print(f"warning: {line}", file=sys.stderr, flush=True)


def distribution(ep: EntryPoint) -> str | None:
    """The name of the distribution that declares ``ep`` (None where unknown: an entry point made in code)."""
    dist = getattr(ep, "dist", None)
    try:
        name = dist.metadata["Name"] if dist is not None else None
    except Exception:  # noqa: BLE001 - unreadable metadata: the distribution is not named
        name = None
    return name or None


def _same_distribution(a: str | None, b: str) -> bool:
    return a is not None and a.lower().replace("-", "_") == b.lower().replace("-", "_")


def describe(ep: EntryPoint) -> str:
    """``entry point `name = value` in group G of distribution D`` (what every plugin message names)."""
    dist = distribution(ep)
    return (f"entry point `{ep.name} = {ep.value}` in group {ep.group} of "
            + (f"distribution {dist}" if dist else "an unnamed distribution"))


def where(component: object) -> str | None:
    """``"module:qualname"`` of a class or function (what a message names it by); None for anything else."""
    module, qualname = getattr(component, "__module__", None), getattr(component, "__qualname__", None)
    return f"{module}:{qualname}" if isinstance(module, str) and isinstance(qualname, str) else None


def broken_plugin(name: object, offered: Iterable[str] = ()) -> PluginError | None:
    """The error of a plugin called ``name`` that some registry found broken (a listing left it out: a config
    choice that refuses it then names it through this); None when none did. ``offered``: the choices the refusal
    listed (Hydra's "expected one of [...]"): of several registries with a broken ``name``, the one they come from,
    so that the error names the key's own kind."""
    found = [r for r in _REGISTRIES if isinstance(name, str) and name in r.failed]
    offered = set(offered)
    own = [r for r in found if offered and offered <= set(r.names())]
    return (own or found)[0].failed[name] if found else None


class Registry(Mapping, Generic[T]):
    """``registry[name]`` is :meth:`get` (``KeyError`` when unknown); iterating gives :meth:`loadable`.

    - ``kind``: the words of messages ("generation backend"); ``group``: the entry-point group;
      ``builtin``: ``{name: component or "module:attribute"}`` in the order :meth:`names` lists them.
    - ``accept(name, obj) -> component`` checks what a built-in line, an entry point, an import path or
      :meth:`register` gives and returns the component (e.g. instantiates a class); it raises the kind's own error
      for a wrong object (for an entry point's object, the registry raises a :class:`PluginError` from it).
    - ``error(message) -> Exception``: the exception of an unknown name.
    - ``unknown(name, known) -> Exception`` (optional): replaces ``error("unknown <kind> ...; known: a | b")``
      for a name that is nowhere; ``known`` is :meth:`names`.
    - ``component`` (optional): the type of a kind whose components carry their own ``name`` (:meth:`add`).
    - ``paths(name, exc) -> Exception`` (optional): the kind also takes an import path ``module:attribute`` as a
      name (one known nowhere else); the exception raised (from ``exc``, an ``ImportError`` or ``AttributeError``)
      when it does not import."""

    def __init__(self, kind: str, group: str, builtin: Mapping[str, object], *, accept: Callable[[str, object], T],
                 error: Callable[[str], Exception],
                 unknown: Callable[[str, list[str]], Exception] | None = None,
                 component: type | None = None,
                 paths: Callable[[str, Exception], Exception] | None = None):
        self.kind, self.group, self.builtin = kind, group, dict(builtin)
        self.accept, self.error, self.unknown = accept, error, unknown
        self.component, self.paths = component, paths
        self.loaded: dict[str, T] = {}  # built-in, entry-point and import-path components, once accepted
        self.registered: dict[str, T] = {}  # register()
        self.installed: dict[str, EntryPoint] | None = None  # the group, read once
        self.failed: dict[str, PluginError] = {}  # broken plugins (raised by get, left out of listings)
        self.warned: set[str] = set()  # the warning lines already printed
        _REGISTRIES.append(self)

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
        """``{name: EntryPoint}`` of the group, read on the first call: an entry point named like a built-in is left
        out, and of several declaring one name the project's own wins, else the first on ``sys.path`` (a warning
        line each)."""
        if self.installed is None:
            by_name: dict[str, list[EntryPoint]] = {}
            for ep in entry_points(group=self.group):
                by_name.setdefault(ep.name, []).append(ep)
            self.installed = {}
            for name, eps in by_name.items():
                if name in self.builtin:
                    for ep in eps:
                        self._warn(f"clash:{name}:{ep.value}", f"{self.kind} plugin {name!r} ({describe(ep)}) has "
                                   f"the name of a built-in {self.kind}: the built-in one is used; rename the entry "
                                   "point to use the plugin")
                    continue
                own = [ep for ep in eps if _same_distribution(distribution(ep), PROJECT)]
                chosen = (own or eps)[0]
                if len({(distribution(ep), ep.value) for ep in eps}) > 1:
                    others = "; ".join(describe(ep) for ep in eps if ep is not chosen)
                    self._warn(f"clash:{name}", f"{self.kind} {name!r} is declared by more than one package: "
                               f"{describe(chosen)} is used, not {others}; rename the other entry point to use it")
                self.installed[name] = chosen
        return self.installed

    def names(self) -> list[str]:
        """The built-in components in their order, then those registered in code, then the entry points (sorted),
        less the plugins found broken (:meth:`get`); nothing is imported."""
        names = list(self.builtin) + [n for n in self.registered if n not in self.builtin]
        return names + sorted(n for n in self.discovered() if n not in names and n not in self.failed)

    def loadable(self) -> list[str]:
        """:meth:`names` less the plugins that are broken, each found by loading it (built-in and registered ones
        are not loaded) and left out with one warning line: what a schema, a config choice, ``--help`` or a message
        lists, so that a broken plugin breaks no command that does not choose it."""
        out = []
        for name in self.names():
            if self._plugin(name) is not None:
                try:
                    self.get(name)
                except PluginError as e:
                    self._warn(f"broken:{name}", f"{self.kind} plugin {name!r} is left out: {e.details}")
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
        """The component called ``name``; :class:`PluginError` for a broken plugin; ``unknown`` (or ``error``)
        listing the known ones for a name known nowhere."""
        if not isinstance(name, str):
            raise self._unknown(name)
        if name in self.registered:
            return self.registered[name]
        if name in self.failed:
            raise self.failed[name].with_traceback(None)
        if name not in self.loaded:
            ep = self._plugin(name)
            self.loaded[name] = self.accept(name, self._load(name)) if ep is None else self._load_plugin(name, ep)
        return self.loaded[name]

    def _plugin(self, name: str) -> EntryPoint | None:
        """The entry point ``name`` loads from when it is a plugin (neither built in nor registered in code)."""
        if name in self.builtin or name in self.registered:
            return None
        return self.discovered().get(name)

    def _load_plugin(self, name: str, ep: EntryPoint) -> T:
        """The plugin's component, accepted; a :class:`PluginError` when it cannot be imported or is refused."""
        try:
            obj = ep.load()
        except Exception as e:  # noqa: BLE001 - any failure of the plugin's import is the plugin's, named
            raise self._broken(name, ep, f"importing {ep.value} failed: {type(e).__name__}: {e}") from e
        try:
            return self.accept(name, obj)
        except Exception as e:  # noqa: BLE001 - a wrong object (the kind's refusal), or a constructor that fails
            why = str(e) if isinstance(e, (ValueError, TypeError)) else f"{type(e).__name__}: {e}"
            raise self._broken(name, ep, f"{ep.value} is not a valid {self.kind}: {why}") from e

    def _broken(self, name: str, ep: EntryPoint, problem: str) -> PluginError:
        """The plugin's error, kept in ``failed``; the other choices it offers are :meth:`loadable` (never another
        broken plugin: one not loaded yet is loaded to know, and is recorded first, so this ends)."""
        dist = distribution(ep)
        fix = f"pip uninstall {dist}" if dist else "uninstall the package that declares it"
        details = f"{problem} ({describe(ep)}); fix that package or remove it ({fix})"

        def error(others: list[str]) -> PluginError:
            return PluginError(f"{self.kind} plugin {name!r} cannot be used: {details}" + (
                f", or choose another {self.kind}: {' | '.join(others)}" if others else ""),
                               kind=self.kind, name=name, group=self.group, value=ep.value, distribution=dist,
                               details=details)

        self.failed[name] = error([])
        self.failed[name] = error([n for n in self.loadable() if n != name])
        return self.failed[name]

    def _warn(self, key: str, line: str) -> None:
        if key not in self.warned:
            self.warned.add(key)
            warn(line)

    def _unknown(self, name) -> Exception:
        if self.unknown is not None:
            return self.unknown(name, self.names())
        return self.error(f"unknown {self.kind} {name!r}; known: {' | '.join(self.names())}")

    def _load(self, name: str) -> object:
        """What a built-in name or an import path names, before ``accept``: a built-in component, or the import of
        a built-in line or an import path."""
        value = self.builtin.get(name)
        if value is not None and not isinstance(value, str):
            return value
        if value is None and self.paths is not None and ":" in name:
            from importlib import import_module

            module, _, attribute = name.partition(":")
            try:
                return getattr(import_module(module), attribute)
            except (ImportError, AttributeError) as e:
                raise self.paths(name, e) from e
        if value is None:
            raise self._unknown(name)
        from importlib.metadata import EntryPoint  # deferred: the module-level one is for type checking only

        return EntryPoint(name, value, self.group).load()

    def __getitem__(self, name: str) -> T:
        if name not in self:
            raise KeyError(name)
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        """Whether ``name`` is known (an import path is not; a broken plugin is: :meth:`get` names what is wrong);
        the group is read only for a name neither built in nor registered."""
        return isinstance(name, str) and (name in self.builtin or name in self.registered or name in self.discovered())

    def __iter__(self) -> Iterator[str]:
        return iter(self.loadable())

    def __len__(self) -> int:
        return len(self.loadable())

    def __repr__(self) -> str:
        return f"{self.kind} registry {self.names()}"
