"""Named data sources: a data path ``<scheme>:<rest>`` whose scheme is a registered source resolves to a file.

A source is a function ``resolver(rest) -> path`` (``rest`` is the text after ``<scheme>:``) that returns
the path of a readable data file, building or caching it as it likes, and raises
:class:`eval_hooks.io.DataError` for a ``rest`` it cannot serve. The trainer knows no source by name; a
package plugs one in either in code::

    from trainer.data.sources import register_data_source
    register_data_source("mysrc", my_resolver)

or, without the trainer ever importing it, through its package metadata (entry-point group
:data:`ENTRY_POINT_GROUP`; this repository's ``pyproject.toml`` declares the demo's source this way)::

    [project.entry-points."selectrust.data_sources"]
    mysrc = "mypackage.sources:resolve"

The group is read on the first path whose scheme is not registered in code, and an entry point is
loaded only when its scheme is used. Every other path is returned unchanged: plain paths, ``hf:`` dataset
ids and saved-dataset directories (read by :mod:`eval_hooks.hf_data`), URLs (``s3://...``) and Windows
drives (``C:\\data``). A path that looks like ``<scheme>:<rest>`` but names no known source and no
existing file or saved dataset is an error that lists the known sources.
"""

from __future__ import annotations

import re
from importlib.metadata import EntryPoint, entry_points
from pathlib import Path
from typing import Callable

from eval_hooks.dataset_ids import HF_PREFIX, is_dataset_source
from eval_hooks.io import DataError

ENTRY_POINT_GROUP = "selectrust.data_sources"
# At least two characters (``C:`` is a drive) and no ``//`` after the colon (a URL is not a source).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9_.+-]+):(?!//)")
_RESERVED = (HF_PREFIX.rstrip(":"),)

Resolver = Callable[[str], str]
_SOURCES: dict[str, Resolver] = {}
_entry_points: dict[str, EntryPoint] | None = None  # read once, lazily


def register_data_source(scheme: str, resolver: Resolver) -> None:
    """Make ``<scheme>:<rest>`` paths resolve through ``resolver(rest)``. Registering the same resolver
    again is a no-op; another resolver for a registered scheme is an error."""
    if not _SCHEME.fullmatch(f"{scheme}:") or scheme in _RESERVED:
        raise ValueError(f"data source scheme {scheme!r}: need letters/digits/_.+- starting with a letter, at "
                         f"least 2 characters, not one of {list(_RESERVED)}")
    if not callable(resolver):
        raise TypeError(f"data source {scheme!r}: the resolver must be callable, got {resolver!r}")
    known = _SOURCES.get(scheme)
    if known is not None and known is not resolver:
        raise ValueError(f"data source {scheme!r} is already registered ({known.__module__}.{known.__qualname__})")
    _SOURCES[scheme] = resolver


def _discovered() -> dict[str, EntryPoint]:
    global _entry_points
    if _entry_points is None:
        found: dict[str, EntryPoint] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            found.setdefault(ep.name, ep)  # the first distribution on sys.path wins, as for imports
        _entry_points = found
    return _entry_points


def known_data_sources() -> list[str]:
    """Schemes registered in code or declared by an installed package's entry point."""
    return sorted(set(_SOURCES) | set(_discovered()))


def _resolver(scheme: str) -> Resolver | None:
    if scheme in _SOURCES:
        return _SOURCES[scheme]
    ep = _discovered().get(scheme)
    if ep is None:
        return None
    try:
        resolver = ep.load()
    except Exception as e:  # noqa: BLE001 - any import error of the plugin, named
        raise DataError(f"data source {scheme!r}: entry point {ep.value!r} (group {ENTRY_POINT_GROUP}) failed to "
                        f"load: {type(e).__name__}: {e}") from e
    register_data_source(scheme, resolver)
    return resolver


def resolve_data_path(path: str) -> str:
    """``<scheme>:<rest>`` of a known data source -> the file it resolves to; any other path unchanged
    (see the module docstring)."""
    m = _SCHEME.match(str(path))
    if m is None or m.group(1) in _RESERVED:
        return path
    scheme = m.group(1)
    resolver = _resolver(scheme)
    if resolver is not None:
        return str(resolver(str(path)[m.end():]))
    if is_dataset_source(path) or Path(path).exists():  # a saved dataset ``dir:split``, a file named ``a:b``
        return path
    raise DataError(f"{path!r} names data source {scheme!r}, which is not known (known: {known_data_sources()}); "
                    f"a package declares one with an entry point in group {ENTRY_POINT_GROUP!r} (present once "
                    "the package is installed: pip install -e .) or registers it with "
                    "trainer.data.sources.register_data_source", path=path)
