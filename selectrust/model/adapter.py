"""Checks of a LoRA adapter before it is used: finite values, and shapes that fit the base model.

- :func:`check_adapter_finite`: every tensor of ``adapter_model.safetensors`` is finite; a NaN/Inf is an
  error naming the file and the tensor (a NaN adapter merged or trained on gives a NaN model, and the
  training loop would blame the data of the first skipped step).
- :func:`check_adapter_fits`: every LoRA tensor's shape fits the module of ``model.path`` it targets
  (the model is built from its ``config.json`` on the ``meta`` device: no weights load), so an adapter
  trained on another base (another hidden size or vocabulary) fails in one line naming both shapes,
  before any model loads and before a run directory is written, instead of peft's ``size mismatch``
  traceback after the model loaded.
- :func:`check_adapter_dir`: a PEFT adapter directory with safetensors weights (the config checks'
  ``trainer.config.check_adapter_dir`` call it and re-raise its error as a ``ConfigError``).
- :func:`check_adapter_path`: the same question in ``recipes/evaluate.py``'s words (``adapter_path``: a
  ``FileNotFoundError`` or ``ValueError`` naming how to convert a pickled ``adapter_model.bin``).
- :func:`check_adapter`: both value checks; called by the config checks of
  every entry point (``model.init_adapter``, ``recipes/merge.py``'s ``adapters``, ``recipes/evaluate.py``'s
  ``adapter_path``). :func:`check_adapter_finite` runs again where an adapter's weights are loaded
  (``selectrust.model.policy``, ``trainer.eval_bridge``), for callers that skip the config checks.
"""

from __future__ import annotations

import json
from pathlib import Path

from .settings import ModelConfig

WEIGHTS = "adapter_model.safetensors"
_PREFIX = "base_model.model."
_LORA = {".lora_A.": "A", ".lora_B.": "B", ".lora_embedding_A": "eA", ".lora_embedding_B": "eB"}


class AdapterError(ValueError):
    """An adapter that cannot be used on this model (non-finite values, or shapes of another base); the config
    checks re-raise it as a ``ConfigError``."""


def check_adapter_dir(path, field: str = "model.init_adapter") -> Path:
    """A PEFT adapter directory with safetensors weights (never a pickled ``adapter_model.bin``); returns it
    resolved. :class:`AdapterError` naming ``field`` otherwise."""
    d = Path(path).expanduser()
    if not d.is_dir():
        raise AdapterError(f"{field}={path!r}: no such directory")
    if not (d / "adapter_config.json").is_file():
        hint = " (it holds a full model: use it as model.path)" if (d / "config.json").is_file() else ""
        raise AdapterError(f"{field}={path!r}: not a PEFT adapter directory, {d / 'adapter_config.json'} is missing{hint}")
    if not (d / WEIGHTS).is_file():
        raise AdapterError(f"{field}={path!r}: {d / WEIGHTS} is missing (only safetensors adapters are loaded, never "
                           f"pickled adapter_model.bin)")
    return d.resolve()


def check_adapter_path(path: str, field: str = "adapter_path") -> None:
    """A LoRA adapter directory with safetensors weights: ``adapter_model.bin`` (a pickle, which peft would
    unpickle) is refused, naming the field and how to convert it."""
    p = Path(path).expanduser()
    if not p.is_dir() or not (p / "adapter_config.json").is_file():
        raise FileNotFoundError(f"{field}={path!r}: not a LoRA adapter directory (no adapter_config.json)")
    if not (p / "adapter_model.safetensors").is_file():
        found = sorted(x.name for x in p.iterdir() if x.name.startswith("adapter_model"))
        raise ValueError(f"{field}={path!r}: no adapter_model.safetensors (found {found or 'no weights'}); only "
                         f"safetensors adapters are loaded (a .bin is a pickle): convert it with "
                         f"safetensors.torch.save_file in a trusted environment")


def check_adapter_finite(adapter_dir, field: str = "adapter") -> None:
    """Raise :class:`AdapterError` naming the file and the first tensor holding a NaN or Inf."""
    import torch  # deferred: imports torch

    path = Path(adapter_dir).expanduser() / WEIGHTS
    for name, t in _tensors(path, field):
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise AdapterError(f"{field}: {path}: tensor {name!r} holds {bad} non-finite value(s) (NaN/Inf) of "
                               f"{t.numel()}; this adapter would give a NaN model (retrain it, or use an "
                               f"earlier checkpoint's adapter)")


def _tensors(path: Path, field: str):
    """``(name, tensor)`` of a safetensors file; an unreadable file is an :class:`AdapterError` naming it."""
    from safetensors import safe_open  # deferred: imports safetensors

    try:
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                yield name, f.get_tensor(name)
    except (OSError, ValueError, RuntimeError) as e:  # SafetensorError is a generic Exception subclass
        raise AdapterError(f"{field}: {path}: not a readable safetensors file ({type(e).__name__}: {e})") from None
    except Exception as e:  # noqa: BLE001 - safetensors_rust.SafetensorError
        if type(e).__name__ != "SafetensorError":
            raise
        raise AdapterError(f"{field}: {path}: not a readable safetensors file ({e})") from None


def _meta_model(model_path: str, trust_remote_code: bool):
    """The model of ``model_path`` built from its config on the meta device (no weights); None when its config
    cannot be read here (a hub id not in the cache): the shapes are then checked when the model loads."""
    import torch  # deferred: imports torch
    from transformers import AutoConfig, AutoModelForCausalLM  # deferred: imports torch, transformers

    from .load import resolve_model_path  # deferred: import cycle with selectrust.model.load

    try:
        config = AutoConfig.from_pretrained(resolve_model_path(model_path), trust_remote_code=trust_remote_code)
    except (OSError, ValueError):
        return None
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, trust_remote_code=trust_remote_code)


def _expected_shape(module, kind: str, shape: tuple) -> tuple | None:
    """The shape a LoRA tensor of ``kind`` (A, B, eA, eB) needs on ``module`` (rank from ``shape``)."""
    r = shape[0] if kind in ("A", "eA") else shape[-1]
    if kind in ("A", "B") and hasattr(module, "in_features"):
        return (r, module.in_features) if kind == "A" else (module.out_features, r)
    if kind in ("eA", "eB") and hasattr(module, "num_embeddings"):
        return (r, module.num_embeddings) if kind == "eA" else (module.embedding_dim, r)
    return None


def check_adapter_fits(adapter_dir, model_path: str, *, field: str = "adapter",
                       trust_remote_code: bool = False) -> None:
    """Raise :class:`AdapterError` when a tensor of the adapter does not fit ``model_path``'s modules."""
    from safetensors import safe_open  # deferred: imports safetensors

    model = _meta_model(model_path, trust_remote_code)
    if model is None:
        return
    modules, params = dict(model.named_modules()), dict(model.named_parameters())
    d = Path(adapter_dir).expanduser()
    base = json.loads((d / "adapter_config.json").read_text() or "{}").get("base_model_name_or_path")
    with safe_open(str(d / WEIGHTS), framework="pt") as f:
        for name in f.keys():
            shape = tuple(f.get_slice(name).get_shape())
            key = (name[len(_PREFIX):] if name.startswith(_PREFIX) else name).replace(".base_layer.", ".")
            kind = next((k for marker, k in _LORA.items() if marker in key), None)
            target = key.split(next(m for m in _LORA if _LORA[m] == kind))[0] if kind else key
            if kind is not None:
                found = target in modules
                expected = _expected_shape(modules[target], kind, shape) if found else None
            else:  # a full tensor (modules_to_save): the parameter of that name
                found = target in params
                expected = tuple(params[target].shape) if found else None
            if not found:
                raise AdapterError(f"{field}: {d / WEIGHTS}: tensor {name!r} targets {target!r}, which model.path="
                                   f"{model_path!r} does not have (the adapter was trained on {base!r})")
            if expected is not None and tuple(expected) != shape:
                raise AdapterError(f"{field}: {d / WEIGHTS}: tensor {name!r} has shape {list(shape)} but model.path="
                                   f"{model_path!r} needs {list(expected)} there: the adapter was trained on another "
                                   f"base ({base!r})")


def check_adapter(adapter_dir, model_cfg: ModelConfig, field: str) -> None:
    """Both checks, before any model loads (see the module docstring)."""
    check_adapter_finite(adapter_dir, field)
    check_adapter_fits(adapter_dir, model_cfg.path, field=field, trust_remote_code=model_cfg.trust_remote_code)
