"""The one file hasher and the one directory hasher of the repository (standard library only).

- :func:`file_sha256`: the SHA-256 (hex) of a file's bytes, read in chunks; computed on every call.
- :func:`file_sha256_once`: the same value, computed once per process for each file state (path, size, mtime,
  ctime, inode, device: an overwrite in place changes its ctime, which nothing can set back); used where a large
  file (model weights) is hashed again and again in one process (the model cache's check, a chain's stage starts).
  :func:`remember_file_sha256` records a hash already known (a file just written and hashed).
- :func:`dir_sha256`: one SHA-256 over files below a directory: for each file, in path order, the line
  ``"<path relative to the directory, posix>\\0<file_sha256>\\n"``. Data pins (``trainer/data/pins.py``) and stage
  starts (``recipes/stages/start.py``) record it, and a finished stage is reused only while it is unchanged, so
  its value must never change (``tests/selectrust/core/test_hashing.py`` pins it on fixed bytes).
- :func:`canonical_json_sha256`: a JSON file hashed by what it says, not how it is written (sorted keys, and
  sorted lists where order means nothing); stage starts use it for ``adapter_config.json``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Callable, Iterable

_CHUNK = 1 << 22  # bytes read at a time
_ONCE: dict[tuple, str] = {}  # (path, size, mtime_ns, ctime_ns, inode, device) -> sha256: once per process


def file_sha256(path: str | Path) -> str:
    """Hex SHA-256 of the bytes of the file ``path`` (64 characters); reads it in full on every call."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(_CHUNK):
            h.update(block)
    return h.hexdigest()


def _state(path: str | Path) -> tuple:
    """What identifies one state of a file: (resolved path, size, mtime_ns, ctime_ns, inode, device)."""
    st = Path(path).stat()
    return str(Path(path).resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev


def file_sha256_once(path: str | Path) -> str:
    """:func:`file_sha256`, computed once per process for each state of the file (see the module docstring)."""
    key = _state(path)
    if key not in _ONCE:
        _ONCE[key] = file_sha256(path)
    return _ONCE[key]


def remember_file_sha256(path: str | Path, digest: str) -> None:
    """Record ``digest`` as the hash of ``path`` in its present state (a file this process wrote and hashed), so
    :func:`file_sha256_once` does not read it again."""
    _ONCE[_state(path)] = digest


def canonical_json_sha256(path: str | Path, unordered: Iterable[str] = ()) -> str:
    """Hex SHA-256 of the JSON file ``path`` in canonical form: keys sorted, no whitespace
    (``json.dumps(sort_keys=True, separators=(",", ":"))``), and the list under each key named in ``unordered``
    (at any depth) sorted, as order there decides nothing (a set written out in a per-process order). A file
    that is not JSON: :func:`file_sha256` of its bytes. ``{}`` hashes as its bytes do."""
    try:
        data = json.loads(Path(path).read_text())
    except (ValueError, UnicodeDecodeError):
        return file_sha256(path)
    keys = frozenset(unordered)

    def canon(x, key=None):
        if isinstance(x, dict):
            return {k: canon(v, k) for k, v in x.items()}
        if isinstance(x, list):
            items = [canon(v) for v in x]
            return sorted(items, key=lambda v: json.dumps(v, sort_keys=True)) if key in keys else items
        return x

    text = json.dumps(canon(data), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()


def dir_sha256(root: str | Path, files: Iterable[Path] | None = None, *,
               file_hash: Callable[[Path], str] = file_sha256) -> str:
    """Hex SHA-256 over ``files`` (paths below ``root``; default: every file below it, recursively), in sorted
    path order, each as ``"<relative posix path>\\0<file_hash(path)>\\n"``. ``file_hash``: :func:`file_sha256` or
    :func:`file_sha256_once` (the same values)."""
    root = Path(root)
    chosen = (q for q in root.rglob("*") if q.is_file()) if files is None else files
    h = hashlib.sha256()
    for p in sorted(chosen):
        h.update(f"{p.relative_to(root).as_posix()}\0{file_hash(p)}\n".encode())
    return h.hexdigest()
