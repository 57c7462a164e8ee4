"""The model settings the foundation's model loading reads (:func:`selectrust.model.load_policy`,
:func:`~selectrust.model.load_policy_for_inference`, :func:`~selectrust.model.export_merged`): the ``model`` group
of every trainer and evaluation config (``trainer/config/schemas.py`` takes it from here), declared with the
foundation's own :func:`~selectrust.core.settings.setting` and :class:`~selectrust.core.settings.Choice`, so the
foundation reads no trainer schema. Standard library only: importing it costs nothing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional

from selectrust.core.settings import choice_type
from selectrust.core.settings import setting as _f

#: The choice kinds of the model group (``trainer.config.choices`` hands them on with the others).
Dtype = choice_type("Dtype", ("float32", "bfloat16", "float16"), __name__)
InitAdapterMode = choice_type("InitAdapterMode", ("merge", "continue"), __name__)


@dataclass
class LoraConfig:
    enabled: bool = _f(True, "Train a LoRA adapter (peft). False = full fine-tuning with a frozen reference copy.")
    r: int = _f(16, "LoRA rank.")
    alpha: int = _f(32, "LoRA alpha (scaling = alpha / r).")
    dropout: float = _f(0.0, "LoRA dropout. Keep 0.0 where runs must be bit-reproducible across resumes.")
    target_modules: list[str] = _f(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        "Module names to wrap; 'all-linear' as the single entry means every linear layer but the head.")


@dataclass
class ModelConfig:
    path: str = _f("tiny", "HF model directory or hub id, or 'tiny' / 'tiny:<preset>' for the built-in random-init Llama.")
    dtype: Dtype = _f("float32", "Weight dtype: float32 | bfloat16 | float16.")
    trust_remote_code: bool = _f(False, "Allow custom modelling code from the model repo. Off unless you trust it.")
    attn_implementation: Optional[str] = _f(None, "e.g. sdpa | flash_attention_2 | eager; None = transformers default.")
    gradient_checkpointing: bool = _f(False, "Recompute activations in backward (saves memory, costs ~30% time).")
    logprob_chunk: int = _f(0, "Log-probs through the LM head this many completion positions at a time, never "
                               "building the (B, T, V) logits (trainer/logprobs/chunked_logprobs.py); 0 = full logits "
                               "(recipes/distill.py always projects chunk-wise: 0 = 1024 positions there).")
    lora: LoraConfig = field(default_factory=LoraConfig)
    init_adapter: Optional[str] = _f(None, "PEFT adapter directory (safetensors) to start from, e.g. a previous stage's "
                                           "<run_dir>/final; None = start from model.path alone.")
    init_adapter_mode: InitAdapterMode = _f("merge", "merge: fold init_adapter into the base weights in memory, then train a fresh "
                                         "LoRA (or all weights); the reference (DPO, GRPO KL) is the merged model. "
                                         "continue: keep training init_adapter (needs model.lora.enabled; its own r, "
                                         "alpha and targets apply); the reference is a frozen copy of it.")
