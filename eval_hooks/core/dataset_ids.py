"""Which data paths name a Hugging Face ``datasets`` source (``hf:...`` ids and ``save_to_disk``
directories, optionally with ``:<split>``): string and directory checks only, so the error type
(:mod:`eval_hooks.core.errors`) can word a location as a row, and :mod:`eval_hooks.core.hf_data` loads them."""

from __future__ import annotations

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
