"""A registry of named components of one kind (generation backends; the pattern of the families' registry):
built-in ones (``name -> "module:attribute"``), ones registered in code, and the entry points of installed
packages (one entry-point group per kind), looked up in that order. A component's module is imported the first
time it is used; the group is read once, the first time a name is not built in or registered."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Callable, Generic, TypeVar

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

T = TypeVar("T")


def entry_points(group: str):
    """The installed packages' entry points of ``group`` (``importlib.metadata``, imported on first use)."""
    from importlib.metadata import entry_points as installed

    return installed(group=group)


class Registry(Mapping, Generic[T]):
    """``registry[name]`` is :meth:`get` (``KeyError`` when unknown); iterating gives :meth:`names`.

    ``accept(name, obj) -> component`` checks what an entry point (or a built-in line) names and returns the
    component (e.g. instantiates a class); ``error(message)`` is the exception of an unknown or broken name."""

    def __init__(self, kind: str, group: str, builtin: dict[str, str], *, accept: Callable[[str, object], T],
                 error: Callable[[str], Exception]):
        self.kind, self.group, self.builtin = kind, group, builtin
        self.accept, self.error = accept, error
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
        if self.installed is None:  # the first distribution on sys.path wins a name, as for imports
            self.installed = {ep.name: ep for ep in reversed(list(entry_points(group=self.group)))}
        return self.installed

    def names(self) -> list[str]:
        """The built-in components in their order, then those registered in code, then the entry points (sorted)."""
        names = list(self.builtin) + [n for n in self.registered if n not in self.builtin]
        return names + sorted(n for n in self.discovered() if n not in names)

    def get(self, name: str) -> T:
        """The component called ``name``; ``error`` listing the known ones otherwise."""
        if name in self.registered:
            return self.registered[name]
        if name not in self.loaded:
            from importlib.metadata import EntryPoint

            value = self.builtin.get(name)
            ep = EntryPoint(name, value, self.group) if value else self.discovered().get(name)
            if ep is None:
                raise self.error(f"unknown {self.kind} {name!r}; known: {' | '.join(self.names())}")
            self.loaded[name] = self.accept(name, ep.load())
        return self.loaded[name]

    def __getitem__(self, name: str) -> T:
        if name not in self:
            raise KeyError(name)
        return self.get(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self.names()

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())

    def __len__(self) -> int:
        return len(self.names())

    def __repr__(self) -> str:
        return f"{self.kind} registry {self.names()}"
