"""The completion record of a recipe stage that is not a training run (``stage_complete.json``, written and read
by :class:`recipes.stages.StageRunner`), and what makes it trustworthy.

The record holds the stage's provenance (recipe, composed config, the content hash of each input), its result (the
recipe's return value) and, sealed in by :func:`seal`, the SHA-256 of every file the stage wrote (``outputs``:
relative path -> hash) and the name of the JSON file among them whose content is the result (``result_file``:
``metrics.json`` for an evaluation, ``mining_stats.json`` for pair mining), or None when no file holds it.

A record is trusted only as far as the stage's own files back it (:func:`verified_result`):

- a record that cannot be read (cut short, not a JSON object, no result) or that has no ``outputs`` (written before
  outputs were sealed, or cut off between its two writes) is not a completion: the stage runs again;
- an output file that is missing or whose hash changed: the stage runs again;
- the result is read from ``result_file`` (its hash checked with the others), never from the record, so a record
  whose result was edited by hand is not believed (the edit is reported in one line); without a ``result_file`` the
  recorded result must match its hash (``result_sha256``), else the stage runs again.

Running again never loses work: the runner first moves the earlier directory aside to ``<name>.old-<n>``.

Under a runner given a provenance function (the demos), the record also holds the stage's ``provenance``
(``trainer/runtime/provenance.py``: precision, threads, git commit, package versions), and a finished training stage
gets a record too (:func:`write_training_record`: its recipe and provenance; its weights are pinned by the stages
that start from them), so every finished stage says what it was made under (:func:`recorded_provenance`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any
from selectrust.core.io import write_json_atomic

COMPLETE_RECORD = "stage_complete.json"
_NOT_OUTPUTS = (COMPLETE_RECORD, ".lock")  # the record itself; a lock file is no output


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, ensure_ascii=False)


def read_record(path: Path) -> tuple[dict | None, str | None]:
    """``(record, None)``; ``(None, None)`` when there is no record; ``(None, why)`` when the file cannot be read as
    a record (cut short, not a JSON object, or without a ``result``)."""
    if not path.is_file():
        return None, None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"{path} is not readable JSON ({getattr(e, 'msg', None) or e.reason}): cut short or damaged"
    if not isinstance(record, dict) or "result" not in record:
        return None, f"{path} is not a completion record (expected a JSON object with a 'result')"
    return record, None


def output_hashes(out_dir: Path) -> dict[str, str]:
    """``{relative path: SHA-256}`` of every file under ``out_dir`` but the record (and a lock file)."""
    from selectrust.core.hashing import file_sha256  # deferred: tests patch it

    return {p.relative_to(out_dir).as_posix(): file_sha256(p) for p in sorted(Path(out_dir).rglob("*"))
            if p.is_file() and p.name not in _NOT_OUTPUTS}


def _result_file(out_dir: Path, result: Any) -> str | None:
    """The name of the top-level JSON file of ``out_dir`` whose content is ``result`` (a JSON value), or None."""
    want = _canonical(result)
    for p in sorted(Path(out_dir).glob("*.json")):
        if p.name in _NOT_OUTPUTS:
            continue
        try:
            if _canonical(json.loads(p.read_text(encoding="utf-8"))) == want:
                return p.name
        except (UnicodeDecodeError, json.JSONDecodeError):
            continue
    return None


def seal(path: Path) -> dict:
    """Add ``outputs``, ``result_file`` and ``result_sha256`` to the record at ``path`` (just written by the runner
    with its provenance and result, so its ``result`` is in the form JSON gives it back); rewrite it; return it."""
    record = json.loads(path.read_text(encoding="utf-8"))
    out_dir = path.parent
    record.update(outputs=output_hashes(out_dir), result_file=_result_file(out_dir, record["result"]),
                  result_sha256=hashlib.sha256(_canonical(record["result"]).encode()).hexdigest())
    write_json_atomic(path, record)
    return record


def verified_result(record: dict, out_dir: Path) -> tuple[Any, str | None, str | None]:
    """``(result, None, note)`` when the stage's files match the record's hashes: the result as the stage's own
    ``result_file`` holds it (``note``: one line when the record's copy differs, e.g. edited by hand; else None);
    ``(None, why, None)`` when the record cannot be trusted (the module docstring), so the stage must run again."""
    recorded = record.get("outputs")
    if not isinstance(recorded, dict):
        return None, "its record has no hashes of the stage's outputs (an earlier version's, or cut short)", None
    now = output_hashes(out_dir)
    changed = sorted(k for k in recorded if now.get(k) != recorded[k])
    if changed:
        return None, ("its outputs changed since it finished (" + ", ".join(
            f"{k} {'missing' if k not in now else 'edited'}" for k in changed[:5]) + ")"), None
    name = record.get("result_file")
    if name is None:
        if hashlib.sha256(_canonical(record["result"]).encode()).hexdigest() != record.get("result_sha256"):
            return None, "its recorded result does not match the result's hash (edited by hand?)", None
        return record["result"], None, None
    if name not in recorded:
        return None, f"its result file {name!r} is not among its recorded outputs", None
    result = json.loads((out_dir / name).read_text(encoding="utf-8"))
    note = None if _canonical(result) == _canonical(record["result"]) else (
        f"the result in {out_dir / COMPLETE_RECORD} differs from the stage's own {name} (edited by hand?): the "
        f"result is read from {name}")
    return result, None, note


def write_training_record(stage_dir: Path, recipe: str, provenance: dict) -> None:
    """A finished training stage's ``stage_complete.json``: its recipe and provenance (no result: its output is its
    ``final/``, whose weights the stages starting from it pin by hash)."""
    write_json_atomic(Path(stage_dir) / COMPLETE_RECORD, {"recipe": recipe, "training": True, "provenance": provenance})


def recorded_provenance(stage_dir: Path) -> dict | None:
    """The provenance a finished stage recorded in its ``stage_complete.json``; None when there is none (no record,
    one that cannot be read, or one of an earlier version)."""
    path = Path(stage_dir) / COMPLETE_RECORD
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    value = record.get("provenance") if isinstance(record, dict) else None
    return value if isinstance(value, dict) else None
