"""What a chain stage started from, pinned by content hash (used by :class:`recipes.stages.StageRunner`).

A stage records in ``<stage dir>/stage_start.json`` the weights it started from: ``model.path`` and,
when set, ``model.init_adapter`` (the previous stage's ``final/``), each with the SHA-256 of its weight
files (``*.safetensors`` and the ``config.json`` / ``adapter_config.json`` beside them). A model path
that is not a local directory (a hub id) is recorded by name. When the stage is met again (to skip it
as complete, or to resume it) the start is computed anew; a different start means the stage's weights
sit on other weights than the ones it would start from now (an earlier stage was retrained), so the
stage is not complete: the runner refuses, naming both hashes, or retrains it under
``trainer.rerun_stale_stages=true``.

A stage's declared inputs (another stage's output: a pairs file, an adapter) are pinned the same way
(:func:`path_identity`), in ``stage_start.json`` for a training stage and in ``stage_complete.json`` for any
other (``recipes/stages/``).

A stage whose ``run_complete.json`` exists but whose ``final/`` lost its weights is not finished either:
:func:`final_is_complete` tells the runner to resume it (from its newest complete checkpoint) or retrain it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from selectrust.core.hashing import canonical_json_sha256, dir_sha256, file_sha256_once
from selectrust.model import resolve_model_path

START_RECORD = "stage_start.json"
_WEIGHT_FILES = ("*.safetensors", "config.json", "adapter_config.json")
# adapter_config.json lists that PEFT writes from a set, in an order that differs from process to process
_ADAPTER_UNORDERED = ("target_modules", "modules_to_save")


def _weight_file_sha256(path: Path) -> str:
    """The hash of one weight or config file: ``adapter_config.json`` canonically
    (:func:`selectrust.core.hashing.canonical_json_sha256`, its set-like lists sorted), every other file by its
    bytes, once per process."""
    if path.name == "adapter_config.json":
        return canonical_json_sha256(path, _ADAPTER_UNORDERED)
    return file_sha256_once(path)


def weights_sha256(directory: Path) -> str | None:
    """One SHA-256 over the weight and config files of a model or adapter directory (name and content of
    each, in name order: :func:`selectrust.core.hashing.dir_sha256`, each file hashed once per process, so a
    chain hashes its base model once; ``adapter_config.json`` by its canonical JSON, so the order PEFT writes
    ``target_modules`` in does not count); None when the directory holds no weights."""
    d = Path(directory)
    files = {p for pattern in _WEIGHT_FILES for p in d.glob(pattern) if p.is_file()}
    if not any(p.suffix == ".safetensors" for p in files):
        return None
    return dir_sha256(d, files, file_hash=_weight_file_sha256)


def final_is_complete(final: Path) -> bool:
    """``final/`` holds a loadable adapter or model (weights and their config)."""
    has_config = (final / "adapter_config.json").is_file() or (final / "config.json").is_file()
    return has_config and weights_sha256(final) is not None


def _local_dir(path: str) -> Path | None:
    p = Path(resolve_model_path(str(path))).expanduser()
    return p.resolve() if p.is_dir() else None


def path_identity(path) -> dict:
    """``{"path", "sha256"}`` of a stage's input: a file's SHA-256, a model or adapter directory's
    :func:`weights_sha256`, any other directory's files (``selectrust.core.hashing.dir_sha256``); None for what is not a
    local path (a hub id, recorded by name)."""
    local = Path(str(path)).expanduser()
    if local.is_file():
        return {"path": str(path), "sha256": file_sha256_once(local)}
    local = _local_dir(path)
    if local is None:
        return {"path": str(path), "sha256": None}
    return {"path": str(path), "sha256": weights_sha256(local) or dir_sha256(local)}


def start_identity(cfg) -> dict:
    """``{"model.path": {...}, "model.init_adapter": {...}}`` of a composed stage config: each with its
    ``path`` and ``sha256`` (None for a model named by a hub id: recorded by name only)."""
    out = {}
    for key, path in (("model.path", cfg.model.path), ("model.init_adapter", cfg.model.init_adapter)):
        if not path:
            continue
        local = _local_dir(path)
        out[key] = {"path": str(path), "sha256": weights_sha256(local) if local is not None else None}
    return out


def start_differences(recorded: dict, now: dict) -> list[str]:
    """``"key: path: sha256 at the stage's start A != now B"`` for every start input that changed."""
    diffs = []
    for key in sorted(set(recorded) | set(now)):
        a, b = recorded.get(key, {}), now.get(key, {})
        if a.get("sha256") != b.get("sha256"):  # a changed path is a config difference, reported as such
            diffs.append(f"{key}: {b.get('path', a.get('path', '?'))}: sha256 when the stage started "
                         f"{a.get('sha256', '<absent>')} (path {a.get('path', '<absent>')}) != now "
                         f"{b.get('sha256', '<absent>')} (path {b.get('path', '<absent>')})")
    return diffs


def read_start(stage_dir: Path) -> dict | None:
    """The recorded start (None for a stage from before starts were recorded, or one not started)."""
    p = Path(stage_dir) / START_RECORD
    return json.loads(p.read_text()) if p.is_file() else None


def write_start(stage_dir: Path, identity: dict) -> None:
    Path(stage_dir).mkdir(parents=True, exist_ok=True)
    tmp = Path(stage_dir) / (START_RECORD + ".tmp")
    tmp.write_text(json.dumps(identity, indent=2) + "\n")
    os.replace(tmp, Path(stage_dir) / START_RECORD)
