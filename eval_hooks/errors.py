"""The error every bad input raises (:class:`DataError`, naming file, line and field), and which paths name a
``datasets`` source: its errors say ``row`` where a file's say ``line``.

The lowest module of ``eval_hooks``: :mod:`eval_hooks.io` and :mod:`eval_hooks.hf_data` both build on it.
"""

from __future__ import annotations

import os
from pathlib import Path

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


def is_dataset_source(path: str | Path) -> bool:
    """``hf:...``, a saved-dataset directory, or one with a ``:split`` suffix."""
    s = str(path)
    return s.startswith(HF_PREFIX) or is_saved_dataset(split_disk_spec(s)[0])


class DataError(ValueError):
    """Bad input data. ``path``/``line``/``field`` locate the problem (any may be ``None``)."""

    def __init__(self, problem: str, *, path: str | os.PathLike | None = None, line: int | None = None,
                 field: str | None = None, accepted: str | None = None):
        self.problem = problem
        self.path = None if path is None else str(path)
        self.line = line
        self.field = field
        self.accepted = accepted
        where = []
        if self.path is not None:
            where.append(self.path)
        if line is not None:
            where.append(f"{'row' if self.path is not None and is_dataset_source(self.path) else 'line'} {line}")
        if field is not None:
            where.append(f"field '{field}'")
        msg = (", ".join(where) + ": " if where else "") + problem
        if accepted:
            msg += f" (accepted: {accepted})"
        super().__init__(msg)
