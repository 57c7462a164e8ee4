"""Which data paths name a Hugging Face ``datasets`` source (``hf:...`` ids and ``save_to_disk``
directories, optionally with ``:<split>``): string and directory checks only, so the error type
(:mod:`selectrust.core.errors`) can word a location as a row, and :mod:`selectrust.core.hf_data` loads them."""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

HF_PREFIX = "hf:"
_DISK_MARKERS = ("dataset_info.json", "state.json", "dataset_dict.json")


def is_saved_dataset(path: str | Path) -> bool:
    """A directory written by ``datasets``' ``save_to_disk`` (a Dataset or a DatasetDict)."""
    p = Path(path)
    return p.is_dir() and any((p / m).exists() for m in _DISK_MARKERS)


def split_disk_spec(path: str) -> tuple[str, str | None]:
    """``/dir:split`` -> (``/dir``, ``split``) when ``/dir`` is a saved dataset; else (path, None)."""
    head, sep, tail = str(path).rpartition(":")
    if sep and head and tail and "/" not in tail and is_saved_dataset(head):
        return head, tail
    return str(path), None


class DatasetSource(NamedTuple):
    """A data path that names a ``datasets`` source, parsed once: ``label`` is the path as given (what errors
    name); for a ``save_to_disk`` directory, ``directory`` and its ``split`` (None: the only split); for an
    ``hf:`` id both are None (:func:`selectrust.core.hf_data.parse_hf_spec` reads the id)."""

    label: str
    directory: str | None = None
    split: str | None = None


def dataset_source(path: str | Path) -> DatasetSource | None:
    """The :class:`DatasetSource` that ``path`` names, or None for any other path (a file, a missing path)."""
    s = str(path)
    if s.startswith(HF_PREFIX):
        return DatasetSource(s)
    directory, split = split_disk_spec(s)
    return DatasetSource(s, directory, split) if is_saved_dataset(directory) else None


def is_dataset_source(path: str | Path) -> bool:
    """``hf:...``, a saved-dataset directory, or one with a ``:split`` suffix."""
    return dataset_source(path) is not None
