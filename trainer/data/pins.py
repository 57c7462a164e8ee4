"""A content hash for every kind of data source a run reads (``data_hashes.json``, ``trainer/runtime/run_dir.py``).

``pin(path)`` returns ``{"path", "sha256", "kind"}`` (and ``"source"``, the path as configured, when it
differs from the pinned one):

- ``file``: a plain file, or what a registered data source (``toy:...``) resolves to: SHA-256 of the file;
- ``dataset_dir``: a ``save_to_disk`` directory (``/dir`` or ``/dir:split``), or an ``hf:<local dir>`` id:
  one SHA-256 over every file under the directory (relative name and content, in name order:
  ``selectrust.core.hashing.dir_sha256``);
- ``rows``: an ``hf:<hub id>`` dataset: SHA-256 of the rows as read (``selectrust.core.hf_data``), in order,
  as canonical JSON; the rows come from the ``datasets`` cache the recipe just filled.

So an edited dataset of any kind is refused on resume like an edited file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from selectrust.core.hashing import dir_sha256, file_sha256
from selectrust.core.hf_data import HF_PREFIX, is_saved_dataset, parse_hf_spec, split_disk_spec
from selectrust.core.data_sources import resolve_data_path


def rows_sha256(source: str) -> str:
    """SHA-256 of the rows of a dataset source as read, in order (canonical JSON, one row a line)."""
    from selectrust.core.hf_data import DatasetSource, load_dataset_records  # deferred: tests patch it

    h = hashlib.sha256()
    for row, rec in load_dataset_records(DatasetSource(source))[0]:
        h.update(json.dumps([row, rec], sort_keys=True, default=str).encode() + b"\n")
    return h.hexdigest()


def pin(path: str) -> dict | None:
    """The pin of one configured data path (None for a path that names nothing readable: the loader
    reports that)."""
    real = str(resolve_data_path(str(path)))
    extra = {} if real == str(path) else {"source": str(path)}
    if real.startswith(HF_PREFIX):
        name = Path(parse_hf_spec(real)[0]).expanduser()
        if name.is_dir():
            return {"path": str(name.resolve()), "sha256": dir_sha256(name), "kind": "dataset_dir", **extra,
                    "source": real}
        return {"path": real, "sha256": rows_sha256(real), "kind": "rows", **extra}
    p = Path(real).expanduser()
    if p.is_file():
        return {"path": str(p.resolve()), "sha256": file_sha256(p), "kind": "file", **extra}
    directory = Path(split_disk_spec(real)[0]).expanduser()
    if is_saved_dataset(directory):
        return {"path": str(directory.resolve()), "sha256": dir_sha256(directory), "kind": "dataset_dir",
                **extra, **({"source": real} if real != str(directory) else {})}
    return None
