"""Records from Hugging Face ``datasets``: ``hf:org/name[:config][:split]`` ids and ``save_to_disk`` directories.

:func:`selectrust.core.io.read_records` hands these sources here; the rows come back as ``(row, record)``
pairs (``row`` 1-based, null cells dropped, as for Parquet) and are then validated exactly like a
file's lines, so an error names the dataset and the row (``hf:org/name:main:test, row 3, field 'gold'``).

- ``hf:<name>[:<config>][:<split>]``: ``datasets.load_dataset(name, config, split=split)``. ``<name>`` is
  a hub id or a local dataset directory (a folder of JSON/CSV/Parquet files, or one written by
  ``save_to_disk``). With one part after the name, it is the split when it looks like one (``train``,
  ``test``, ``validation``, ``dev``, or a slice such as ``train[:100]``), else the config.
- a directory written by ``Dataset.save_to_disk`` / ``DatasetDict.save_to_disk``: ``datasets.load_from_disk``.
  A ``DatasetDict`` needs a split: append ``:<split>`` to the path (``/data/mist_ds:test``).

Without a split, a source with exactly one split uses it; several splits are an error listing them.
Loading a hub id may download it (once, into the ``datasets`` cache); set ``HF_HUB_OFFLINE=1`` to forbid that.
"""

from __future__ import annotations

import re
from typing import Any

from selectrust.core.dataset_ids import (HF_PREFIX, DatasetSource, dataset_source, is_dataset_source, is_saved_dataset,
                                         split_disk_spec)
from selectrust.core.errors import DataError

# Which paths are ``datasets`` sources is decided in :mod:`selectrust.core.dataset_ids` (DataError's messages need
# it); the names are re-exported here, where callers look for them.
__all__ = ["HF_PREFIX", "DatasetSource", "dataset_source", "is_dataset_source", "is_saved_dataset", "split_disk_spec",
           "parse_hf_spec", "load_dataset_records"]

_SPLIT = re.compile(r"^(train|test|validation|valid|dev|eval)(\[.*\])?$|^[A-Za-z_]\w*\[.*\]$")


def parse_hf_spec(spec: str) -> tuple[str, str | None, str | None]:
    """``hf:org/name[:config][:split]`` -> (name, config, split)."""
    parts = re.split(r":(?![^\[]*\])", spec[len(HF_PREFIX):])  # no split inside a slice "train[:10]"
    if not parts[0] or len(parts) > 3 or any(not p for p in parts):
        raise DataError(f"dataset id {spec!r} must look like hf:<org/name>[:<config>][:<split>], e.g. "
                        "hf:openai/gsm8k:main:test")
    name, rest = parts[0], parts[1:]
    if len(rest) == 2:
        return name, rest[0], rest[1]
    if len(rest) == 1:
        return (name, None, rest[0]) if _SPLIT.match(rest[0]) else (name, rest[0], None)
    return name, None, None


def _pick_split(ds, split: str | None, label: str):
    if not hasattr(ds, "keys"):  # a Dataset already
        return ds
    splits = sorted(ds.keys())
    if split is None:
        if len(splits) == 1:
            return ds[splits[0]]
        raise DataError(f"dataset has splits {splits}; name one (append :<split>)", path=label)
    if split not in ds:
        raise DataError(f"dataset has no split {split!r}; it has {splits}", path=label)
    return ds[split]


def load_dataset_records(source: DatasetSource) -> tuple[list[tuple[int, dict]], str]:
    """(``(row, record)`` pairs, label naming the dataset and split for error messages) of a source parsed by
    :func:`selectrust.core.dataset_ids.dataset_source`."""
    label = source.label
    try:
        import datasets
    except ImportError as e:  # pragma: no cover - datasets is a dependency
        raise DataError(f"reading {label!r} needs the 'datasets' package", path=label) from e
    try:
        if source.directory is None:
            name, config, split = parse_hf_spec(label)
            ds = _pick_split(datasets.load_dataset(name, config, split=split), None, label)
        else:
            ds = _pick_split(datasets.load_from_disk(source.directory), source.split, label)
    except DataError:
        raise
    except Exception as e:  # datasets raises many types (missing config, file not found, offline, ...)
        raise DataError(f"cannot load dataset ({type(e).__name__}: {e})", path=label) from None
    records = [(i, {k: _plain(v) for k, v in rec.items() if v is not None})
               for i, rec in enumerate(ds, start=1)]
    return records, label


def _plain(value: Any) -> Any:
    """Drop nulls inside nested structures too (a column present on some rows only)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value
