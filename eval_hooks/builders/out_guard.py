"""What a builder may write over (issue 59): ``--out`` is checked before anything is read or built.

- ``--out`` the same file as an input (after resolving links and ``..``: the same path, or ``os.path.samefile``) is
  refused: a builder never eats its own input.
- ``--out`` an existing file the builder did not write is refused unless ``--overwrite``: a file builder's output
  is recognised by its kind (:data:`OUTPUT_KINDS`: MIST rows are a JSONL whose first line is an object with
  ``item_id``, ``condition`` and ``answer_type``; Med items have the ``<out>.stats.json`` the builder writes beside
  them); an empty file holds nothing to lose.
- ``--out`` an existing directory, for a builder that writes one file, is refused naming the directory.
- A builder that writes a directory (``build-facts``, ``split-folds``) refuses one holding files of the names it
  writes but not its own marker file (``build_stats.json``, ``folds.json``) unless ``--overwrite``.

Every refusal is a :class:`~selectrust.core.errors.DataError` (one line, exit 2, under the CLI contract)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable, Iterable

from selectrust.core.errors import DataError

_ROW_KEYS = ("item_id", "condition", "answer_type")


def _first_line(path: Path) -> str | None:
    try:
        with path.open("rb") as f:
            for raw in f:
                if raw.strip():
                    return raw[:1_000_000].decode("utf-8", "replace")
    except OSError:
        return None
    return ""


def looks_like_rows(path: Path) -> bool:
    """A JSONL of evaluation rows (what ``build-gsm8k``, ``build-nq-swap`` and ``expand`` write), or an empty file."""
    line = _first_line(path)
    if line == "":
        return True
    try:
        obj = json.loads(line) if line else None
    except ValueError:
        return False
    return isinstance(obj, dict) and all(k in obj for k in _ROW_KEYS)


def looks_like_med_items(path: Path) -> bool:
    """Med items written by ``build-medcounterfact``: the stats file it writes beside them exists (or it is empty)."""
    return _first_line(path) == "" or Path(f"{path}.stats.json").is_file()


#: What each file builder writes: ``(the name of the kind, the test of an existing file)``.
OUTPUT_KINDS: dict[str, tuple[str, Callable[[Path], bool]]] = {
    "rows": ("MIST rows (JSONL objects with item_id, condition, answer_type)", looks_like_rows),
    "med": ("Med items with their .stats.json beside them", looks_like_med_items),
}


def _same(a: Path, b: Path) -> bool:
    if a.resolve() == b.resolve():
        return True
    try:
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except OSError:
        return False


def _paths(inputs: Iterable[str | os.PathLike | None]) -> list[Path]:
    return [Path(p) for p in inputs if p is not None and str(p) and Path(p).exists()]


def check_out_file(out: str | os.PathLike, inputs: Iterable[str | os.PathLike | None], *, kind: str,
                   overwrite: bool = False, flag: str = "--out") -> None:
    """Refuse ``out`` (module docstring) before a file builder reads anything; ``inputs``: the paths it reads (a Hub
    id or a path that does not exist is passed over)."""
    path = Path(out)
    for inp in _paths(inputs):
        if _same(path, inp):
            raise DataError(f"{flag} is the input file {inp}: the builder would overwrite what it reads; give "
                            f"another {flag}", path=path)
    if path.is_dir():
        raise DataError(f"{flag} is an existing directory; give the path of the file to write (e.g. "
                        f"{path / 'rows.jsonl'})", path=path)
    what, ours = OUTPUT_KINDS[kind]
    if path.exists() and not overwrite and not ours(path):
        raise DataError(f"{flag} exists and is not a file this builder wrote (expected {what}); nothing was written: "
                        f"give another {flag}, or add --overwrite to replace it", path=path)


def check_out_dir_files(out: str | os.PathLike, inputs: Iterable[str | os.PathLike | None], *,
                        writes: Iterable[str], marker: str, overwrite: bool = False, flag: str = "--out") -> None:
    """Refuse a directory ``out`` (module docstring) for a builder writing the files ``writes`` (names, or glob
    patterns) with ``marker`` among them."""
    path = Path(out)
    if path.exists() and not path.is_dir():
        return  # the builder's own check names it (exists and is not a directory)
    written = sorted({p for pattern in writes for p in path.glob(pattern)}) if path.is_dir() else []
    for inp in _paths(inputs):
        hit = next((w for w in written if _same(w, inp)), None)
        if hit is not None or _same(path, inp):
            raise DataError(f"{flag} holds the input file {inp}, which the builder would overwrite; give another "
                            f"{flag}", path=path)
    if written and not overwrite and not (path / marker).is_file():
        names = ", ".join(p.name for p in written[:3]) + (" ..." if len(written) > 3 else "")
        raise DataError(f"{flag} holds {names}, which this builder did not write (no {marker}); nothing was "
                        f"written: give another {flag}, or add --overwrite to replace them", path=path)
