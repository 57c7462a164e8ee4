"""Named data sources: a data path ``<scheme>:<rest>`` whose scheme is a registered source resolves to a file.

A source is a function ``resolver(rest) -> path`` (``rest`` is the text after ``<scheme>:``) that returns
the path of a readable data file, building or caching it as it likes, and raises
:class:`selectrust.core.io.DataError` for a ``rest`` it cannot serve. Every reader of data resolves its path here
(:func:`selectrust.core.io.read_records` too, so evaluation's command lines take the same paths as the trainers). No
code knows a source by name; a package plugs one in either in code::

    from selectrust.core.data_sources import register_data_source
    register_data_source("mysrc", my_resolver)

or, without this repository ever importing it, through its package metadata (entry-point group
:data:`ENTRY_POINT_GROUP`; this repository's ``pyproject.toml`` declares the demo's source this way)::

    [project.entry-points."selectrust.data_sources"]
    mysrc = "mypackage.sources:resolve"

The group is read on the first path whose scheme is not registered in code, and an entry point is
loaded only when its scheme is used (a broken one is a ``PluginError`` naming it). Every other path is returned unchanged: plain paths, ``hf:`` dataset
ids and saved-dataset directories (read by :mod:`selectrust.core.hf_data`), URLs (``s3://...``) and Windows
drives (``C:\\data``). A path that looks like ``<scheme>:<rest>`` but names no known source and no
existing file or saved dataset is an error that lists the known sources.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable

from selectrust.core.dataset_ids import HF_PREFIX, is_dataset_source
from selectrust.core.errors import DataError
from selectrust.core.plugins import Registry

ENTRY_POINT_GROUP = "selectrust.data_sources"
# At least two characters (``C:`` is a drive) and no ``//`` after the colon (a URL is not a source).
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9_.+-]+):(?!//)")
_RESERVED = (HF_PREFIX.rstrip(":"),)

Resolver = Callable[[str], str]


def _checked(scheme: str, resolver: object) -> Resolver:
    """``resolver`` when ``scheme`` is a well-formed, unreserved scheme and ``resolver`` is callable; ValueError
    (the scheme) or TypeError (the resolver) otherwise."""
    if not _SCHEME.fullmatch(f"{scheme}:") or scheme in _RESERVED:
        raise ValueError(f"data source scheme {scheme!r}: need letters/digits/_.+- starting with a letter, at "
                         f"least 2 characters, not one of {list(_RESERVED)}")
    if not callable(resolver):
        raise TypeError(f"data source {scheme!r}: the resolver must be callable, got {resolver!r}")
    return resolver


#: The data sources: none built in; registered in code (:func:`register_data_source`) or declared by an installed
#: package's entry point (group :data:`ENTRY_POINT_GROUP`), loaded when its scheme is first used.
DATA_SOURCES: Registry[Resolver] = Registry("data source", ENTRY_POINT_GROUP, {}, accept=_checked, error=DataError)


#: ``register_data_source(scheme, resolver)``: make ``<scheme>:<rest>`` paths resolve through ``resolver(rest)``
#: (the scheme and the resolver checked); the same resolver again is a no-op; another resolver for a scheme in use
#: (registered, or an entry point already loaded) is an error naming the one there.
register_data_source = DATA_SOURCES.register


def known_data_sources() -> list[str]:
    """Schemes registered in code or declared by an installed package's entry point."""
    return sorted(DATA_SOURCES.names())


def _resolver(scheme: str) -> Resolver | None:
    """The resolver of ``scheme`` (an entry point's is imported now); None for a scheme that is no data source."""
    return DATA_SOURCES.get(scheme) if scheme in DATA_SOURCES else None


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
                    "selectrust.core.data_sources.register_data_source", path=path)
