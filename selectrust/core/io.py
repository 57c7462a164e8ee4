"""Reading records (JSONL or Parquet) with line numbers, and writing outputs atomically.

Every problem with input data raises :class:`DataError` (:mod:`selectrust.core.errors`, re-exported here), whose message names the file, the line (for
Parquet: the 1-based row), the field and what would have been accepted. The CLI turns it into one
clean message and a non-zero exit.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections import deque
from pathlib import Path
from typing import Any, Iterable, Iterator

from selectrust.core.data_sources import resolve_data_path
from selectrust.core.dataset_ids import dataset_source
from selectrust.core.errors import DataError  # noqa: F401  (the readers' error; imported from here too)
import re

PARQUET_SUFFIXES = (".parquet", ".pq")


def read_records(path: str | os.PathLike) -> list[tuple[int, dict]]:
    """All records of a JSONL or Parquet file, or of a ``datasets`` source, as ``(line, record)`` pairs.

    JSONL: one JSON object per line; blank lines are skipped (their numbers still count). Parquet
    (by suffix ``.parquet``/``.pq``): ``line`` is the 1-based row number, and null cells are dropped
    (a column present on some rows only). An empty file is an error. ``hf:org/name[:config][:split]``
    and ``save_to_disk`` directories (``selectrust.core.hf_data``) give 1-based rows like Parquet; errors
    about them name the dataset and the row. A ``<scheme>:<rest>`` path of a data source is read from the file
    it resolves to (:func:`selectrust.core.data_sources.resolve_data_path`: a broken source plugin is named).
    """
    from .hf_data import load_dataset_records  # deferred: tests patch it

    path = resolve_data_path(path) if isinstance(path, str) else path
    source = dataset_source(path)
    if source is not None:
        records, label = load_dataset_records(source)
        if not records:
            raise DataError("dataset holds no rows", path=label)
        return records
    p = Path(path)
    if not p.exists():
        raise DataError("file does not exist", path=p)
    if p.is_dir():
        raise DataError("is a directory, expected a .jsonl or .parquet file (or a directory written by "
                        "datasets' save_to_disk)", path=p)
    records = _read_parquet(p) if p.suffix.lower() in PARQUET_SUFFIXES else list(_read_jsonl(p))
    if not records:
        raise DataError("file holds no records", path=p, accepted="one JSON object per line, or a Parquet table")
    return records


def _read_jsonl(p: Path) -> Iterator[tuple[int, dict]]:
    with open(p, "rb") as fh:
        for lineno, raw in enumerate(fh, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"not valid UTF-8 ({e.reason} at byte {e.start})", path=p, line=lineno) from None
            if not text.strip():
                continue
            try:
                obj = json.loads(text)
            except json.JSONDecodeError as e:
                raise DataError(f"malformed JSON ({e.msg} at column {e.colno})", path=p, line=lineno,
                                accepted="one JSON object per line") from None
            if not isinstance(obj, dict):
                raise DataError(f"expected a JSON object, got {type(obj).__name__}", path=p, line=lineno,
                                accepted="one JSON object per line")
            yield lineno, obj


def _read_parquet(p: Path) -> list[tuple[int, dict]]:
    try:
        import pyarrow.parquet as pq

        table = pq.read_table(p)
    except Exception as e:  # pyarrow raises several types for corrupt files
        raise DataError(f"cannot read as Parquet ({type(e).__name__}: {e})", path=p) from None
    # A table has every column on every row; a null there means "absent" (Arrow cannot tell them apart).
    return [(i, {k: _from_arrow(v) for k, v in rec.items() if v is not None})
            for i, rec in enumerate(table.to_pylist(), start=1)]


def _from_arrow(value: Any) -> Any:
    """Arrow map columns come back as lists of (key, value) tuples; make them dicts again."""
    if isinstance(value, dict):
        return {k: _from_arrow(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(x, tuple) and len(x) == 2 for x in value):
            return {k: _from_arrow(v) for k, v in value}
        return [_from_arrow(v) for v in value]
    return value


# -- writing ----------------------------------------------------------------------------------------

def dumps_line(obj: Any) -> str:
    return json.dumps(obj, ensure_ascii=False, default=_json_default) + "\n"


def _json_default(o: Any):
    if hasattr(o, "item"):  # numpy scalars
        return o.item()
    if hasattr(o, "tolist"):
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    if isinstance(o, os.PathLike):
        return os.fspath(o)
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def write_text_atomic(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to a temporary file in the same directory, fsync, then rename over ``path``."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp creates 0600; outputs are ordinary, shareable files
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return p


def write_jsonl_atomic(path: str | os.PathLike, records: Iterable[Any]) -> Path:
    return write_text_atomic(path, "".join(dumps_line(r) for r in records))


def write_json_atomic(path: str | os.PathLike, obj: Any) -> Path:
    return write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False, default=_json_default) + "\n")


def _is_ours(name: str) -> bool:
    return name in {"metrics.json", "item_scores.jsonl", "report.md", "responses.jsonl", "metrics.previous.json"} \
        or name.endswith(".png")


def publish_dir(tmp_dir: Path, out_dir: Path) -> Path:
    """Move a fully built ``tmp_dir`` into place as ``out_dir``.

    If ``out_dir`` is absent, or holds only files an evaluation writes, the whole directory is
    swapped by rename (readers see either the old set or the new set). If it holds anything else
    (a user pointed ``--out`` at a shared folder), nothing of theirs is touched: each file is moved in
    with ``os.replace``, ``metrics.json`` last, so its presence marks a complete set.
    """
    out_dir = Path(out_dir)
    if not out_dir.exists():
        os.replace(tmp_dir, out_dir)
        return out_dir
    if out_dir.is_dir() and all(_is_ours(c.name) and c.is_file() for c in out_dir.iterdir()):
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        os.rmdir(old)
        os.replace(out_dir, old)
        try:
            os.replace(tmp_dir, out_dir)
        except BaseException:
            os.replace(old, out_dir)
            raise
        shutil.rmtree(old, ignore_errors=True)
        return out_dir
    if not out_dir.is_dir():
        raise DataError("output path exists and is not a directory", path=out_dir)
    names = sorted(os.listdir(tmp_dir), key=lambda n: n == "metrics.json")
    for name in names:
        os.replace(tmp_dir / name, out_dir / name)
    shutil.rmtree(tmp_dir, ignore_errors=True)
    return out_dir


def make_tmp_dir_beside(out_dir: str | os.PathLike) -> Path:
    out = Path(out_dir)
    out.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))


def tail_file(path: str | Path, n: int = 40) -> str:
    """The last ``n`` lines of a (possibly large) text file; '' if it does not exist."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            size = f.tell()
            f.seek(max(0, size - 256 * 1024))
            lines = deque(f.read().decode("utf-8", "replace").splitlines(), maxlen=n)
    except OSError:
        return ""
    return "\n".join(lines)


#: Exception types that only wrap an earlier error (vLLM's engine and asyncio): the root cause is elsewhere in the log.
_WRAPPER_ERRORS = ("EngineDeadError", "EngineGenerateError", "CancelledError", "SystemExit", "KeyboardInterrupt")


def root_error_line(text: str) -> str | None:
    """The first ``SomeError: message`` line of a server log that names a root cause (vLLM's ``RuntimeError:
    einsum(): ...`` rather than the ``EngineDeadError`` it causes, or a message that only says "see above"), without
    the log's line prefix; else the last error line; None when there is none."""
    pat = re.compile(r"(?:^|[\s\]])((?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)): (\S.*)$")
    found = []
    for line in text.splitlines():
        m = pat.search(line)
        if m:
            found.append((m.group(1), m.group(0).strip().lstrip("]").strip()))
    for kind, line in found:
        if not kind.endswith(_WRAPPER_ERRORS) and "above" not in line:
            return line
    return found[-1][1] if found else None
