"""Give me a model: the one owner of where a model comes from, how it is cached and checked, and how it loads.

The calls callers use (everything below imports torch/transformers only when called):

- :func:`load_model` / :func:`load_tokenizer` ``(path, ...)``: a causal LM (safetensors only) or its tokenizer from
  any ``model.path``: a directory, a hub id, ``tiny`` / ``tiny:<preset>``, a ``.gguf`` file or ``pkg:<module>``;
- :func:`load_policy` ``(model_cfg, seed=...)``: a training run's ``(model, tokenizer)``, with its starting adapter and
  LoRA; :class:`Reference` is its reference (the adapter disabled, or a frozen copy); :func:`save_policy` saves it;
- :func:`load_policy_for_inference` ``(model_cfg, adapter_path)``: the model an evaluation generates with;
- :func:`load_base_with_adapters` / :func:`export_merged`: a base model with adapters merged, in memory or on disk;
- :func:`resolve_model_path` / :func:`check_model_path`: a ``model.path`` as a loadable directory, or checked cheaply
  (a bad source is a :class:`ModelSourceError`: one line naming it, exit 2 under the error contract);
- :class:`ModelConfig` / :class:`LoraConfig`: the typed ``model`` settings those calls read (``settings``; the trainer's
  config schema takes its ``model`` group from there);
- the adapter checks (:func:`check_adapter`, :func:`check_adapter_dir`, ...), :func:`resolve_mixed_precision`.

Modules: ``source`` (GGUF files and packages, converted once), ``cache`` (the checked on-disk cache), ``model_dir``
(what a model directory must hold; a hub id offline), ``errors`` (``ModelSourceError``), ``load`` (the tiny presets,
path resolution, model/tokenizer loading), ``settings`` (the model settings), ``adapter`` (adapter checks),
``policy`` (the training policy and its reference), ``precision`` (``mixed_precision=auto``). Only this package
calls ``from_pretrained`` for a causal LM (``tests/repo/test_import_rules.py``).
"""

from .adapter import (AdapterError, check_adapter, check_adapter_dir, check_adapter_finite, check_adapter_fits,
                      check_adapter_path)
from .cache import ModelCacheError, cache_root
from .errors import ModelNotFoundError, ModelSourceError
from .load import (TINY_PRESETS, TinyModelSpec, check_model_path, ensure_tiny_model, load_model, load_tokenizer,
                   resolve_model_path)
from .policy import (REFERENCE_ADAPTER, TRAINED_ADAPTER, Reference, export_merged, load_base_with_adapters,
                     load_policy, load_policy_for_inference, save_policy)
from .precision import cpu_has_amx_bf16, cpu_supports_bf16, resolve_mixed_precision
from .settings import LoraConfig, ModelConfig
from .source import GGUF_PACKAGES, GGUFPackage, ensure_gguf_converted, is_gguf_source, is_toy_model

__all__ = [
    "AdapterError", "GGUF_PACKAGES", "GGUFPackage", "LoraConfig", "ModelConfig", "ModelCacheError",
    "ModelNotFoundError", "ModelSourceError",
    "REFERENCE_ADAPTER", "Reference", "TINY_PRESETS", "TRAINED_ADAPTER", "TinyModelSpec", "cache_root", "check_adapter",
    "check_adapter_dir", "check_adapter_finite",
    "check_adapter_fits", "check_adapter_path", "check_model_path", "cpu_has_amx_bf16", "cpu_supports_bf16",
    "ensure_gguf_converted", "ensure_tiny_model", "export_merged", "is_gguf_source", "is_toy_model",
    "load_base_with_adapters", "load_model", "load_policy", "load_policy_for_inference", "load_tokenizer",
    "resolve_mixed_precision", "resolve_model_path", "save_policy",
]
