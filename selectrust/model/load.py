"""Model and tokenizer loading, including the tiny built-in model used as the CPU default.

The tiny model is a random-init Llama-family causal LM with a byte-level tokenizer, built from code
(nothing is downloaded) and cached on disk with ``save_pretrained``. ``model.path: tiny`` (or
``tiny:<name>``) anywhere a model path is accepted resolves to it.

Why Llama and not Qwen2: transformers 5 replaces a saved Qwen2 tokenizer with its own on reload.
Why not ByT5Tokenizer: it appends EOS to every prompt, which breaks assistant masks and generation.
"""

from __future__ import annotations

import hashlib
import json
import os
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

from ..core.plugins import Registry
from .cache import cached_build, check_cache_entry
from .errors import ModelNotFoundError, ModelSourceError
from .model_dir import check_hub_id, check_model_dir
from .precision import torch_dtype
from .source import check_gguf_file, ensure_gguf_converted, gguf_file, is_gguf_source

# Special tokens of the byte tokenizer. Ids 0..N-1 are these, then the 256 bytes.
SPECIAL_TOKENS = ["<pad>", "<s>", "</s>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"]

# `{% generation %}` marks assistant tokens so `return_assistant_tokens_mask` works (SFT/TRL).
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'assistant' %}"
    "<|assistant|>\n{% generation %}{{ message['content'] }}<|end|>{% endgeneration %}\n"
    "{% else %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}<|end|>\n"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


@dataclass(frozen=True)
class TinyModelSpec:
    """Shape of the built-in tiny Llama. The default is ~0.4M parameters: fast enough for CI."""

    hidden_size: int = 64
    num_hidden_layers: int = 2
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    intermediate_size: int = 176
    max_position_embeddings: int = 1024
    seed: int = 0

    def key(self) -> str:
        blob = json.dumps(asdict(self), sort_keys=True) + "|tok-v1"
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


def _preset(name: str, spec: object) -> TinyModelSpec:
    if not isinstance(spec, TinyModelSpec):
        raise ValueError(f"tiny model preset {name!r}: not a TinyModelSpec (got {spec!r})")
    return spec


#: The tiny model presets (``model.path: tiny:<name>``): these, ``TINY_PRESETS.register(name, TinyModelSpec(...))``
#: in code, or an installed package's entry point in group ``selectrust.tiny_presets`` naming a ``TinyModelSpec``.
TINY_PRESETS: Registry[TinyModelSpec] = Registry("tiny model preset", "selectrust.tiny_presets", {
    "tiny": TinyModelSpec(),
    # ~3M parameters: the size the evaluation benchmark uses.
    "tiny-3m": TinyModelSpec(hidden_size=256, num_hidden_layers=4, num_attention_heads=8,
                             num_key_value_heads=4, intermediate_size=688),
    # ~0.44M parameters: the embedded demo's model (learns the toy key->digit task in about a minute).
    "tiny-demo": TinyModelSpec(hidden_size=128, num_hidden_layers=2, num_attention_heads=4,
                               num_key_value_heads=2, intermediate_size=344),
    # ~25M parameters: the size the DPO benchmark uses.
    "tiny-25m": TinyModelSpec(hidden_size=512, num_hidden_layers=8, num_attention_heads=8,
                              num_key_value_heads=8, intermediate_size=1376),
}, accept=_preset, error=ValueError,
    unknown=lambda name, known: ValueError(f"unknown tiny model preset {name!r}; known: {sorted(known)}"))

#: Generation budget (new tokens) for the built-in tiny model, which answers one digit (mining's default for it,
#: where a real model gets :func:`eval_hooks.parsers.answer_budget`).
TOY_ANSWER_BUDGET = 4


def build_byte_tokenizer():
    """A byte-level ``PreTrainedTokenizerFast`` with a chat template; no BOS/EOS added on encode."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers  # deferred: imports tokenizers
    from transformers import PreTrainedTokenizerFast  # deferred: imports torch, transformers

    alphabet = pre_tokenizers.ByteLevel.alphabet()  # the 256 byte symbols, GPT-2 style
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for sym in sorted(alphabet):
        vocab[sym] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<s>",
        eos_token="<|end|>",
        pad_token="<pad>",
        padding_side="left",
        additional_special_tokens=[t for t in SPECIAL_TOKENS if t not in ("<pad>", "<s>", "<|end|>")],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_tiny_model(spec: TinyModelSpec, vocab_size: int, pad_id: int, eos_id: int, bos_id: int):
    import torch  # deferred: imports torch
    from transformers import LlamaConfig, LlamaForCausalLM  # deferred: imports torch, transformers

    config = LlamaConfig(
        vocab_size=vocab_size,
        hidden_size=spec.hidden_size,
        intermediate_size=spec.intermediate_size,
        num_hidden_layers=spec.num_hidden_layers,
        num_attention_heads=spec.num_attention_heads,
        num_key_value_heads=spec.num_key_value_heads,
        max_position_embeddings=spec.max_position_embeddings,
        pad_token_id=pad_id,
        eos_token_id=eos_id,
        bos_token_id=bos_id,
        tie_word_embeddings=False,
    )
    torch.manual_seed(spec.seed)
    model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = pad_id
    model.generation_config.eos_token_id = eos_id
    return model


def ensure_tiny_model(name: str = "tiny", root: str | Path | None = None) -> Path:
    """Build (once) and return the directory of a tiny model preset; safe under concurrent ranks."""
    spec = TINY_PRESETS.get(name)

    def build(tmp: Path) -> None:
        tok = build_byte_tokenizer()
        model = build_tiny_model(spec, len(tok), tok.pad_token_id, tok.eos_token_id, tok.bos_token_id)
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)

    return cached_build(root, f"{name}-{spec.key()}", build)


def resolve_model_path(path: str) -> str:
    """``tiny`` / ``tiny:<preset>`` -> cached directory; a ``.gguf`` file or ``pkg:<module>`` -> its cached
    dequantized safetensors directory (converted once, ``selectrust/model/source.py``); anything else unchanged.
    Cache entries are checked on every call (``selectrust/model/cache.py``), also when named by their directory
    (a damaged one is then refused, naming the remedy)."""
    if path == "tiny" or path.startswith("tiny:") or path in TINY_PRESETS:
        name = path.split(":", 1)[1] if ":" in path else path
        return str(ensure_tiny_model(name))
    if is_gguf_source(path):
        return str(ensure_gguf_converted(path))
    check_cache_entry(path)
    return path


def check_model_path(path: str, field: str = "model.path") -> None:
    """Fail early (before loading anything heavy), in one line naming ``field`` and the path (a
    :class:`~selectrust.model.errors.ModelSourceError`, exit 2 under the error contract), on a model source that
    cannot load: a missing, empty or incomplete directory, truncated weights, a damaged cache entry, a GGUF file
    that is missing, cut short or no GGUF, a ``pkg:`` package absent or without a GGUF
    (:mod:`selectrust.model.model_dir`). A hub id is checked when it loads (:func:`load_model`,
    :func:`load_tokenizer`: while offline it must be in the Hugging Face cache), so a real model's config validates
    on a machine without its weights."""
    if path == "tiny" or path.startswith("tiny:") or path in TINY_PRESETS:
        return
    if is_gguf_source(path):
        check_gguf_file(gguf_file(path, field), field)  # names the install command when a pkg: package is absent
        return
    p = Path(path).expanduser()
    if p.is_dir():
        check_model_dir(path, field)
    elif p.exists():
        raise ModelSourceError(f"{field}={path}: a file, not a model directory (nor a .gguf file)", source=path)
    elif path.startswith(("/", ".", "~")) or os.sep in path and Path(path).parent.exists():
        raise ModelNotFoundError(f"{field}: model directory {path!r} does not exist", source=path)
    elif path.count("/") > 1 or not path.strip():
        raise ModelNotFoundError(f"{field}: model directory {path!r} does not exist (nor is it a hub id "
                                 f"'org/name')", source=path)


@contextmanager
def _source_errors(path: str):
    """Loading ``path``: a hub id not cached while offline is refused first (:func:`check_hub_id`); transformers' "no
    such model / file" errors (an ``OSError`` without an errno: a hub id that does not exist, a file missing) and
    damaged safetensors become one :class:`ModelSourceError` line naming it."""
    from safetensors import SafetensorError  # deferred: imports safetensors

    tiny = path == "tiny" or path.startswith("tiny:") or path in TINY_PRESETS
    if not (tiny or is_gguf_source(path) or Path(path).expanduser().exists()):
        check_hub_id(path)  # while offline, an id the Hugging Face cache does not hold: one line, before loading
    try:
        yield
    except (OSError, SafetensorError) as e:
        if isinstance(e, OSError) and e.errno is not None:
            raise  # a disk or permission error: the contract names the file itself
        problem = " ".join(str(e).split())
        raise ModelSourceError(f"model {path!r} cannot be loaded: {problem}", source=path) from e


def load_tokenizer(path: str, *, trust_remote_code: bool = False):
    from transformers import AutoTokenizer  # deferred: imports torch, transformers

    with _source_errors(path):
        tok = AutoTokenizer.from_pretrained(resolve_model_path(path), trust_remote_code=trust_remote_code)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    return tok


def load_model(path: str, *, dtype: str = "float32", device: str | None = None,
               trust_remote_code: bool = False, attn_implementation: str | None = None):
    """Load a causal LM from safetensors weights only (``use_safetensors=True``: never unpickles)."""
    from transformers import AutoModelForCausalLM  # deferred: imports torch, transformers

    dtype = torch_dtype(dtype)
    kwargs = {}
    if attn_implementation:
        kwargs["attn_implementation"] = attn_implementation
    with _source_errors(path):
        model = AutoModelForCausalLM.from_pretrained(resolve_model_path(path), dtype=dtype, use_safetensors=True,
                                                     trust_remote_code=trust_remote_code, **kwargs)
    if device is not None:
        model.to(device)
    return model
