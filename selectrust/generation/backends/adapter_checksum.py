"""The adapter-checksum protocol between the trainer and a generation server's client.

A LoRA adapter directory synced to a server (``trainer/eval_bridge/weight_sync.py`` writes it) carries
:data:`CHECKSUM_FILE`, one line: the sha256 of the directory's other files (:func:`adapter_checksum`). The
trainer logs it on every metrics line; the client (``vllm_server.py``) puts its first 12 hex digits in the
adapter's served name, so every rank names the same weights the same way and new weights always get a new
name (a server may cache an adapter by name).

API (standard library only, cheap to import)
---
    digest = write_checksum(adapter_dir)     # computes adapter_checksum(adapter_dir), writes it, returns it
    read_checksum(adapter_dir) -> str        # what was written; OSError when there is no checksum file
    checksum_or_none(adapter_dir) -> str | None   # the same, None when missing, unreadable or empty
    adapter_checksum(adapter_dir) -> str     # recomputed from the files (equal to what was written)
"""

from __future__ import annotations

import hashlib
from pathlib import Path

#: Inside each synced adapter directory: the sha256 of the other files, then a newline.
CHECKSUM_FILE = "CHECKSUM.sha256"


def adapter_checksum(directory: str | Path) -> str:
    """sha256 (64 hex digits) over the adapter's files (sorted by name; name, NUL, bytes for each), excluding the
    checksum file itself and subdirectories. Covers the weights and the config (rank, alpha, target modules)."""
    h = hashlib.sha256()
    for p in sorted(Path(directory).iterdir()):
        if p.is_file() and p.name != CHECKSUM_FILE:
            h.update(p.name.encode() + b"\0")
            with open(p, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def write_checksum(directory: str | Path) -> str:
    """Compute :func:`adapter_checksum` of ``directory``, write it (and a newline) to its :data:`CHECKSUM_FILE`
    (replacing any earlier one) and return it. Call it once every other file is written."""
    checksum = adapter_checksum(directory)
    (Path(directory) / CHECKSUM_FILE).write_text(checksum + "\n")
    return checksum


def read_checksum(directory: str | Path) -> str:
    """The checksum :func:`write_checksum` recorded in ``directory`` (whitespace stripped; ``""`` for an empty
    file). Raises ``OSError`` (``FileNotFoundError``) when ``directory`` has no readable :data:`CHECKSUM_FILE`."""
    return (Path(directory) / CHECKSUM_FILE).read_text().strip()


def checksum_or_none(directory: str | Path) -> str | None:
    """:func:`read_checksum`, or None when the checksum file is missing, unreadable or empty (an adapter not
    written by the trainer's sync)."""
    try:
        return read_checksum(directory) or None
    except OSError:
        return None
