"""What a model directory must hold before anything loads it, and a hub id's check while offline: cheap checks (the
config, file names, the safetensors headers; no weights read) that :func:`selectrust.model.check_model_path` runs at
config-check time, so a wrong ``model.path`` is one line naming the path and what is wrong (a
:class:`~selectrust.model.errors.ModelSourceError`), not a traceback from transformers after minutes.

A model directory holds ``config.json`` (valid JSON), a tokenizer (``tokenizer.json``, ``tokenizer_config.json``,
``tokenizer.model`` or ``vocab.json``) and whole safetensors weights: ``model.safetensors``, or the shards a
``model.safetensors.index.json`` lists, each at least as long as its header says (8 bytes, the header, then the end
of its last tensor's data). A directory that is a model cache entry is checked against its manifest
(:func:`selectrust.model.cache.check_cache_entry`). With ``HF_HUB_OFFLINE=1`` (or ``TRANSFORMERS_OFFLINE=1``) a hub
id must be in the Hugging Face cache (checked when a model or tokenizer loads, not at config time, so a real
model's config validates where its weights are not); online it is left to the download.

Public API: :func:`check_model_dir`, :func:`check_hub_id`, :func:`safetensors_sizes`.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from .cache import ModelCacheError, check_cache_entry
from .errors import ModelNotFoundError, ModelSourceError

__all__ = ["check_hub_id", "check_model_dir", "safetensors_sizes"]

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")
WEIGHTS, WEIGHTS_INDEX = "model.safetensors", "model.safetensors.index.json"
_WHOLE: set[tuple] = set()  # weights files found whole in this process: (path, size, mtime_ns)


def safetensors_sizes(path: Path) -> tuple[int | None, int]:
    """``(bytes expected, bytes found)`` of a safetensors file: 8 + its header's length + the end of its last
    tensor's data, as the header lists them (None when the file ends inside its header or the header is not a
    safetensors header), against the file's size. Reads the header only."""
    found = path.stat().st_size
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            return None, found
        (n,) = struct.unpack("<Q", head)
        if 8 + n > found:
            return None, found
        try:
            header = json.loads(f.read(n))
            ends = [int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"]
        except (ValueError, TypeError, KeyError, IndexError, AttributeError):
            return None, found
    return 8 + n + max(ends, default=0), found


def _weight_files(d: Path, shown: str, field: str) -> list[Path]:
    """The safetensors files of directory ``d``: ``model.safetensors`` or the shards its index lists."""
    if (d / WEIGHTS_INDEX).is_file():
        try:
            shards = sorted(set(json.loads((d / WEIGHTS_INDEX).read_text())["weight_map"].values()))
        except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
            raise ModelSourceError(f"{field}={shown}: {WEIGHTS_INDEX} is unreadable or not a safetensors index "
                                   f"({type(e).__name__}: {e})", source=shown) from None
        if missing := [s for s in shards if not (d / s).is_file()]:
            raise ModelSourceError(f"{field}={shown}: the weights shard {missing[0]} that {WEIGHTS_INDEX} lists is "
                                   f"missing ({len(missing)} of {len(shards)} missing); download the model again",
                                   source=shown)
        return [d / s for s in shards]
    if (d / WEIGHTS).is_file():
        return [d / WEIGHTS]
    pickled = sorted(p.name for p in d.glob("*.bin")) + sorted(p.name for p in d.glob("*.pt"))
    why = (f"it holds only pickled weights ({pickled[0]}), which are never loaded (safetensors only): convert them "
           f"with save_pretrained(..., safe_serialization=True)" if pickled else
           f"it holds no {WEIGHTS} (nor {WEIGHTS_INDEX})")
    raise ModelSourceError(f"{field}={shown}: not a loadable model directory: {why}", source=shown)


def check_model_dir(path: str, field: str = "model.path") -> None:
    """Refuse (one line naming ``field``, the path and the problem) a directory that is no whole model directory
    (the rules in the module docstring)."""
    d = Path(path).expanduser()
    try:
        check_cache_entry(d)
    except ModelCacheError as e:
        raise ModelCacheError(f"{field}={path}: {e}", source=path) from None
    remedy = "point it at a Hugging Face model directory (config.json, tokenizer files, model.safetensors)"
    if not any(d.iterdir()):
        raise ModelSourceError(f"{field}={path}: the model directory is empty; {remedy}", source=path)
    if not (d / "config.json").is_file():
        raise ModelSourceError(f"{field}={path}: the model directory holds no config.json; {remedy}", source=path)
    try:
        json.loads((d / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise ModelSourceError(f"{field}={path}: config.json is not valid JSON ({e})", source=path) from None
    if not any((d / t).is_file() for t in TOKENIZER_FILES):
        raise ModelSourceError(f"{field}={path}: the model directory holds no tokenizer (none of "
                               f"{', '.join(TOKENIZER_FILES)}); save the tokenizer beside the weights", source=path)
    for w in _weight_files(d, path, field):
        st = w.stat()
        key = (str(w.resolve()), st.st_size, st.st_mtime_ns)
        if key in _WHOLE:
            continue
        expected, found = safetensors_sizes(w)
        if expected is None:
            raise ModelSourceError(f"{field}={path}: {w.name} is truncated or not a safetensors file: it ends inside "
                                   f"its header or has none ({found} bytes); download or save the model again",
                                   source=path)
        if found < expected:
            raise ModelSourceError(f"{field}={path}: {w.name} is truncated: {found} bytes found, {expected} expected "
                                   f"(the end of its last tensor's data, as its header lists them); download or save "
                                   f"the model again", source=path)
        _WHOLE.add(key)


def hub_offline() -> bool:
    """Whether Hugging Face downloads are off (``HF_HUB_OFFLINE`` or ``TRANSFORMERS_OFFLINE`` set to 1/true/yes/on)."""
    return any(os.environ.get(k, "").strip().lower() in ("1", "true", "yes", "on")
               for k in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def check_hub_id(path: str, field: str = "model.path") -> None:
    """A ``path`` that is no local file or directory, taken as a hub id (``org/name`` or ``name``): while offline, an
    id whose ``config.json`` is not in the Hugging Face cache is refused (online it is left to the download)."""
    if not hub_offline():
        return
    from huggingface_hub import try_to_load_from_cache  # deferred: imports huggingface_hub

    try:
        cached = try_to_load_from_cache(path, "config.json")
    except ValueError:  # huggingface_hub's HFValidationError: not a valid repo id
        cached = None
    if not isinstance(cached, str):
        raise ModelNotFoundError(f"{field}={path}: no such model directory, and as a hub id it is not in the Hugging "
                                 f"Face cache while downloads are off (HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE): "
                                 f"download it once online, or point {field} at a local model directory", source=path)
