"""The one prompt renderer: a prompt (string or chat messages) + prompt settings -> token ids.

Mining, every trainer (DPO, SFT, GRPO rollouts) and evaluation (the HF and vLLM-server backends)
call :func:`render_prompt`, so a prompt becomes the same token ids wherever it is used: the ids a
model is trained on after a prompt are the ids it generates from at evaluation.

Rules (the settings come from the ``prompt`` config group, :class:`PromptSettings`):

1. Messages. A string prompt becomes one user turn. ``prompt_prefix`` (if set) is put in front of
   the first user turn as ``prefix.rstrip() + "\\n\\n" + content``; ``system_prompt`` (if set and the
   messages have no system turn yet) becomes a leading system turn.
2. Chat template on (``use_chat_template`` and the tokenizer has one): the messages are rendered with
   ``apply_chat_template(..., add_generation_prompt=True, **chat_template_kwargs)`` and the text is
   tokenised with ``add_special_tokens=False``: the template writes any BOS it wants, nothing is added.
3. Chat template off (or a tokenizer without one): the turns' contents are joined by a blank line
   (``"\\n\\n"``) and followed by ONE newline, the separator between prompt and completion (the
   completion's tokens follow it directly). The text is tokenised with ``add_special_tokens=False``,
   and the tokenizer's BOS id is put in front when the tokenizer adds one to plain text (i.e.
   ``tokenizer("")`` yields ``[bos_token_id]``, as Llama tokenizers do; Qwen's adds none).

Completions are always tokenised on their own, without special tokens, after these prompt ids.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Optional, Sequence

#: The separator between prompt and completion when no chat template is used (rule 3).
PLAIN_SEPARATOR = "\n"
#: What joins turns (system, prefix + user) when no chat template is used (rule 3).
PLAIN_TURN_JOIN = "\n\n"


@dataclass(frozen=True)
class PromptSettings:
    """How prompts are rendered (see the module docstring). Built from the ``prompt`` config group
    with :meth:`from_config`."""

    use_chat_template: bool = True
    system_prompt: Optional[str] = None
    prompt_prefix: Optional[str] = None
    chat_template_kwargs: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_config(cls, node) -> "PromptSettings":
        """From a ``prompt`` config node (OmegaConf or any object with the four attributes)."""
        kwargs = node.chat_template_kwargs
        if hasattr(kwargs, "items"):
            try:
                from omegaconf import OmegaConf

                kwargs = OmegaConf.to_container(kwargs, resolve=True) if OmegaConf.is_config(kwargs) else dict(kwargs)
            except ImportError:  # pragma: no cover - omegaconf is a dependency
                kwargs = dict(kwargs)
        return cls(use_chat_template=bool(node.use_chat_template), system_prompt=node.system_prompt or None,
                   prompt_prefix=node.prompt_prefix or None, chat_template_kwargs=dict(kwargs or {}))

    def transport(self) -> "PromptSettings":
        """The settings a generation backend renders request messages with: the template switch and its
        keyword arguments only (the request's messages already hold the system turn and prefix)."""
        return PromptSettings(use_chat_template=self.use_chat_template,
                              chat_template_kwargs=dict(self.chat_template_kwargs))

    def describe(self) -> dict:
        """JSON-able summary (written into evaluation metrics)."""
        return {"use_chat_template": self.use_chat_template, "system_prompt": self.system_prompt,
                "prompt_prefix": self.prompt_prefix, "chat_template_kwargs": dict(self.chat_template_kwargs)}


def prompt_messages(prompt: str | Sequence[Mapping[str, str]], settings: PromptSettings) -> list[dict]:
    """Rule 1: the chat messages of ``prompt`` under ``settings`` (system turn, prefix)."""
    if isinstance(prompt, str):
        messages = [{"role": "user", "content": prompt}]
    else:
        messages = [dict(m) for m in prompt]
        if not messages:
            raise ValueError("empty list of prompt messages")
    if settings.prompt_prefix:
        for m in messages:
            if m["role"] == "user":
                m["content"] = f"{settings.prompt_prefix.rstrip()}\n\n{m['content']}"
                break
    if settings.system_prompt and messages[0]["role"] != "system":
        messages.insert(0, {"role": "system", "content": settings.system_prompt})
    return messages


def uses_template(tokenizer, settings: PromptSettings) -> bool:
    """Whether rule 2 applies (the switch is on and the tokenizer has a chat template)."""
    return bool(settings.use_chat_template) and getattr(tokenizer, "chat_template", None) is not None


def bos_prefix(tokenizer) -> list[int]:
    """``[bos_token_id]`` when the tokenizer adds a BOS to plain text, else ``[]`` (rule 3)."""
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is None:
        return []
    return [bos] if list(tokenizer("")["input_ids"])[:1] == [bos] else []


def render_prompt_text(tokenizer, prompt: str | Sequence[Mapping[str, str]], settings: PromptSettings) -> str:
    """The rendered prompt text (rules 1-3, without the BOS id of rule 3)."""
    messages = prompt_messages(prompt, settings)
    if uses_template(tokenizer, settings):
        return tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                             **dict(settings.chat_template_kwargs))
    return PLAIN_TURN_JOIN.join(m["content"] for m in messages) + PLAIN_SEPARATOR


def render_prompt(tokenizer, prompt: str | Sequence[Mapping[str, str]], settings: PromptSettings) -> list[int]:
    """THE renderer: token ids of ``prompt`` under ``settings`` (module docstring, rules 1-3)."""
    text = render_prompt_text(tokenizer, prompt, settings)
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
    if not uses_template(tokenizer, settings):
        ids = bos_prefix(tokenizer) + ids
    return ids


def request_prompt_ids(tokenizer, settings: PromptSettings, *, prompt: str | None = None,
                       messages: Sequence[Mapping[str, str]] | None = None) -> list[int]:
    """Ids a generation backend generates from for one request: ``messages`` through
    :func:`render_prompt` (with ``settings.transport()``: the messages already hold the system turn and
    prefix), or a raw, already rendered ``prompt`` tokenised as is (no special tokens)."""
    if messages is not None:
        return render_prompt(tokenizer, messages, settings.transport())
    return list(tokenizer(prompt, add_special_tokens=False)["input_ids"])


__all__ = ["PLAIN_SEPARATOR", "PromptSettings", "prompt_messages", "render_prompt", "render_prompt_text",
           "request_prompt_ids", "bos_prefix", "uses_template"]
