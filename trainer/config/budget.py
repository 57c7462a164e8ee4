"""Bounded generation (issue 59, BAD 8): every key that sets a generation budget (:data:`BUDGET_KEYS`:
``algo.max_new_tokens``, ``eval.max_new_tokens`` where the matched evaluation runs, distillation's
``algo.max_reasoning_tokens``) is at most the model's positions (``max_position_embeddings``)
minus the longest prompt, and the memory a generation batch will need (KV cache and logits) must fit in what the
machine has: both refused in one ``ConfigError`` line (exit 2) before any generation (the functions here return
the refusal; :func:`trainer.config.validation.check_generation_budget` raises it).

The model's shape is read without loading weights (:func:`model_shape`): a tiny preset's ``TinyModelSpec``, or the
``config.json`` of a local directory or of a hub id already in the Hugging Face cache (nothing is downloaded). A
model whose shape cannot be read that way (a GGUF file, a package, a hub id not cached) is checked by the same
functions once it is loaded (:func:`shape_of_model`), where the recipes know the longest prompt.

Estimate of one generation batch (:func:`generation_bytes`): the KV cache, ``2 x layers x kv_heads x head_dim x
(prompt + new) x batch x bytes``, plus the logits of one step in float32, ``batch x vocab x 4``; the weights are
not counted (they are loaded already when it matters, and the estimate is a floor). Torch-free.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
import sys
from selectrust.generation.backends import backends_with

#: the keys that set a generation budget (new tokens per completion), where a recipe has them
BUDGET_KEYS = ("algo.max_new_tokens", "eval.max_new_tokens", "algo.max_reasoning_tokens")
_POSITION_FIELDS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "n_ctx")
_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


@dataclass(frozen=True)
class ModelShape:
    positions: int | None
    layers: int | None = None
    kv_heads: int | None = None
    head_dim: int | None = None
    vocab: int | None = None
    source: str = "max_position_embeddings"  # where the positions were read (named in a refusal)


def _shape_from_config(config: dict, source: str) -> ModelShape | None:
    if not isinstance(config, dict):
        return None
    if isinstance(config.get("text_config"), dict):  # a multimodal model: its language model's settings
        config = {**config, **config["text_config"]}
    field = next((f for f in _POSITION_FIELDS if isinstance(config.get(f), int) and config[f] > 0), None)
    heads = config.get("num_attention_heads")
    hidden = config.get("hidden_size")
    head_dim = config.get("head_dim") or (hidden // heads if isinstance(hidden, int) and isinstance(heads, int)
                                          and heads > 0 else None)
    return ModelShape(positions=config[field] if field else None, layers=config.get("num_hidden_layers"),
                      kv_heads=config.get("num_key_value_heads") or heads, head_dim=head_dim,
                      vocab=config.get("vocab_size"), source=f"{source}: {field or 'no positions field'}")


def model_shape(path: str) -> ModelShape | None:
    """The shape of ``model.path`` without loading weights (module docstring); None when it cannot be read so."""
    path = str(path)
    try:
        if path == "tiny" or path.startswith("tiny:"):
            from selectrust.model.load import TINY_PRESETS

            spec = TINY_PRESETS.get(path.partition(":")[2] or "tiny")
            return ModelShape(positions=spec.max_position_embeddings, layers=spec.num_hidden_layers,
                              kv_heads=spec.num_key_value_heads,
                              head_dim=spec.hidden_size // spec.num_attention_heads, vocab=512,
                              source=f"tiny preset {path!r}: max_position_embeddings")
        local = Path(path).expanduser()
        if local.is_dir():
            config = local / "config.json"
            return _shape_from_config(json.loads(config.read_text()), str(config)) if config.is_file() else None
        if path.count("/") == 1 and not local.exists():  # a hub id: only a copy already in the cache
            from huggingface_hub import try_to_load_from_cache

            cached = try_to_load_from_cache(path, "config.json")
            if isinstance(cached, str):
                return _shape_from_config(json.loads(Path(cached).read_text()), f"{path} config.json")
    except Exception:  # noqa: BLE001 - no shape: the loaded model's own is checked later
        return None
    return None


def shape_of_model(model) -> ModelShape | None:
    """The shape of a loaded model (its ``config``)."""
    config = getattr(model, "config", None)
    to_dict = getattr(config, "to_dict", None)
    return _shape_from_config(to_dict(), "the model's config") if callable(to_dict) else None


def _select(cfg, key: str, default=None):
    """``cfg``'s value at the dotted ``key`` or ``default``: the composed config (before the converter) and the typed
    settings (after it) alike, read by attribute."""
    node = cfg
    for part in key.split("."):
        node = getattr(node, part, None) if node is not None else None
        if node is None:
            return default
    return node


def _budgets(cfg) -> dict[str, int]:
    out = {}
    for key in BUDGET_KEYS:
        value = _select(cfg, key)
        if isinstance(value, int) and not isinstance(value, bool) and (key != "eval.max_new_tokens"
                                                                       or _evaluates(cfg)):
            out[key] = value
    return out


def _evaluates(cfg) -> bool:
    """Whether the matched evaluation (``eval.max_new_tokens``) runs: ``eval.enabled``, and in a training recipe
    ``trainer.eval_every_epoch`` or ``trainer.eval_at_end``."""
    if not _select(cfg, "eval.enabled", default=True):
        return False
    if _select(cfg, "trainer") is None or not hasattr(cfg.trainer, "eval_at_end"):
        return True
    return bool(cfg.trainer.eval_every_epoch or cfg.trainer.eval_at_end)


def check_budget(cfg, shape: ModelShape | None, prompt_tokens: int = 0, *, prompt_what: str = "",
                 keys: tuple[str, ...] = BUDGET_KEYS) -> str | None:
    """The refusal of a budget key whose value plus ``prompt_tokens`` (the longest prompt, 0 when not known yet) is
    more than the model's positions; None when every one fits."""
    if shape is None or not shape.positions:
        return None
    for key, value in _budgets(cfg).items():
        if key not in keys or value + prompt_tokens <= shape.positions:
            continue
        room = shape.positions - prompt_tokens
        prompt = f" + the longest prompt's {prompt_tokens} tokens{prompt_what}" if prompt_tokens else ""
        fix = (f"set {key} to at most {room}" if room >= 1 else
               "shorten the prompts (data.max_prompt_len, the rows) or use a model with more positions")
        return (f"{key}={value}{prompt} is more than the {shape.positions} positions of the model "
                f"(model.path={cfg.model.path}; {shape.source}): {fix}")
    return None


def generation_bytes(shape: ModelShape, *, tokens: int, batch: int, dtype: str) -> int | None:
    """The estimate of one generation batch (module docstring); None when the shape lacks a size."""
    if None in (shape.layers, shape.kv_heads, shape.head_dim):
        return None
    kv = 2 * shape.layers * shape.kv_heads * shape.head_dim * tokens * batch * _BYTES.get(str(dtype), 4)
    return kv + batch * (shape.vocab or 0) * 4


def available_bytes(device: str = "auto") -> int | None:
    """What the machine has for it: a visible GPU's free memory (when torch is imported and CUDA is used), else
    the available host memory (psutil)."""
    torch = sys.modules.get("torch")
    if device != "cpu" and torch is not None and os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        try:
            if torch.cuda.is_available():
                return int(torch.cuda.mem_get_info()[0])
        except Exception:  # noqa: BLE001 - no GPU answer: the host's memory
            pass
    try:
        import psutil

        return int(psutil.virtual_memory().available)
    except Exception:  # noqa: BLE001
        return None


def check_memory(cfg, shape: ModelShape | None, *, batch: int, batch_keys: str, prompt_tokens: int,
                 budget_key: str, what: str, available: int | None = None) -> str | None:
    """The refusal of a generation batch (``batch`` completions of ``prompt_tokens`` + ``budget_key`` tokens) whose
    estimate is above the available memory, naming the keys to lower; None when it fits (or cannot be estimated)."""
    budget = _budgets(cfg).get(budget_key)
    if shape is None or budget is None or batch < 1:
        return None
    need = generation_bytes(shape, tokens=prompt_tokens + budget, batch=batch, dtype=str(cfg.model.dtype))
    have = available_bytes(str(getattr(getattr(cfg, "trainer", None), "device", "auto"))) if available is None \
        else available
    if need is None or have is None or need <= have:
        return None
    gib = 2 ** 30
    return (f"{what} would need about {need / gib:.1f} GiB for its KV cache and logits ({batch} "
                      f"completions x ({prompt_tokens} prompt + {budget} new tokens), {shape.layers} layers, "
                      f"{shape.kv_heads} KV heads of {shape.head_dim}), more than the {have / gib:.1f} GiB available: "
            f"lower {budget_key} or {batch_keys}")


def _batches(cfg) -> dict[str, tuple[int, str, str]]:
    """``budget key -> (completions generated at once, the keys that set that number, what generates)``: an
    in-process backend (capability ``in_process``: hf) generates ``generation.batch_size`` completions at once at most; a server's memory is
    its own (not counted here)."""
    backend = _select(cfg, "generation.backend")
    if backend is None or str(backend) not in backends_with("in_process"):
        return {}
    per_call = int(_select(cfg, "generation.batch_size", default=0) or 0)
    out = {"eval.max_new_tokens": (per_call, "generation.batch_size", "an evaluation batch")}
    algo = _select(cfg, "algo")
    if algo is not None and hasattr(algo, "group_size") and hasattr(algo, "prompts_per_step"):
        from trainer.rl.oversample import round_completions

        paired = 2 if _select(cfg, "algo.rollout_mode", default="single_turn") == "paired_context" else 1
        n = round_completions(getattr(algo, "oversample_cap", 1), algo.prompts_per_step, algo.group_size) * paired
        out["algo.max_new_tokens"] = (min(n, per_call) if per_call else n,
                                      "generation.batch_size (or algo.prompts_per_step, algo.group_size)",
                                      "a GRPO round")
    return out


def check_generation(cfg, shape: ModelShape | None, prompt_tokens: int = 0, *, keys: tuple[str, ...] = BUDGET_KEYS,
                     prompt_what: str = "", available: int | None = None) -> str | None:
    """:func:`check_budget`, then :func:`check_memory` of each generation the recipe runs (``keys``' budgets): the
    first refusal, or None (``trainer.config.validation.check_generation_budget`` raises it as a ``ConfigError``)."""
    problem = check_budget(cfg, shape, prompt_tokens, prompt_what=prompt_what, keys=keys)
    for key, (batch, batch_keys, what) in _batches(cfg).items():
        if problem is None and key in keys:
            problem = check_memory(cfg, shape, batch=batch, batch_keys=batch_keys, prompt_tokens=prompt_tokens,
                                   budget_key=key, what=what, available=available)
    return problem
