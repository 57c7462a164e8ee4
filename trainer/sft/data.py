"""SFT's data: the examples (:func:`load_sft_examples`), tokenised SFT batches (single-turn and multi-turn) and the
accumulation-window source.

SFT files hold ``{"messages": [{"role": ..., "content": ...}, ...]}`` (every assistant turn is a
target in multi-turn mode, the last one otherwise) or ``{"prompt": ..., "completion": ...}``.

- Single turn: the prompt is every message before the *last* assistant turn (rendered to ids by the
  one renderer, ``selectrust.generation.prompts.render_prompt``, under the ``prompt`` group), the target is that
  turn's content + EOS (``trainer.logprobs.logprobs.build_pair_batch``). Counterfactual SFT (docs/box2.md#counterfactual-sft): prompt = task + bad
  workflow, target = the verified-correct trajectory.
- Multi turn: the whole conversation; every assistant turn is a target, user/environment turns are
  masked. The mask comes from the chat template's ``{% generation %}`` tags
  (``return_assistant_tokens_mask``); templates without them fall back to per-turn rendering
  (tokens between the rendering of ``messages[:i]`` + generation prompt and of ``messages[:i+1]``),
  which requires the template to render prefixes consistently (checked; raises otherwise).

Loss normalisation: TRL's SFTTrainer divides the summed target NLL by the number of target tokens
of the whole gradient-accumulation window. :class:`WindowSource` draws a step's micro-batches
together and stamps each with ``num_items = window_tokens / grad_accum`` (the loop divides each
micro-batch loss by ``grad_accum``), which reproduces that exactly.
"""

from __future__ import annotations

from typing import Sequence

from selectrust.core.data_sources import resolve_data_path
from selectrust.core.io import DataError, read_records
from selectrust.generation.prompts import PromptSettings, prompt_messages
from trainer.logprobs.logprobs import build_pair_batch
from trainer.logprobs.logprobs import build_pair_batch, right_pad


def split_last_turn(messages: list[dict]) -> tuple[list[dict], str]:
    """(messages before the last assistant turn, that turn's content)."""
    last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
    return messages[:last], messages[last]["content"]


def tokenize_multiturn(tokenizer, messages: list[dict],
                       prompt_settings: PromptSettings | None = None) -> tuple[list[int], list[int]]:
    """``(input_ids, target_mask)`` of a whole conversation; 1 on assistant-turn tokens (incl. their
    end-of-turn token). The system turn, prefix and template kwargs of ``prompt_settings`` apply as in
    :func:`selectrust.generation.prompts.render_prompt` (multi-turn SFT always uses the chat template)."""
    settings = prompt_settings or PromptSettings()
    messages = prompt_messages(messages, settings)
    kw = dict(settings.chat_template_kwargs)
    enc = tokenizer.apply_chat_template(messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                        **kw)
    ids = list(enc["input_ids"])
    mask = list(enc.get("assistant_masks") or [])
    if len(mask) == len(ids) and any(mask):
        return ids, mask
    # Fallback: the template has no {% generation %} tags; mark each assistant turn by rendering prefixes.
    mask = [0] * len(ids)
    for i, m in enumerate(messages):
        if m["role"] != "assistant":
            continue
        start = _ids(tokenizer, tokenizer.apply_chat_template(messages[:i], tokenize=False, add_generation_prompt=True,
                                                              **kw))
        end = _ids(tokenizer, tokenizer.apply_chat_template(messages[:i + 1], tokenize=False, **kw))
        if ids[:len(start)] != start or ids[:len(end)] != end:
            raise ValueError("multi-turn SFT: the chat template renders conversation prefixes inconsistently and "
                             "has no {% generation %} tags; add generation tags to the template")
        for t in range(len(start), len(end)):
            mask[t] = 1
    return ids, mask


def _ids(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def example_lengths(tokenizer, ex: dict, *, multi_turn: bool,
                    prompt_settings: PromptSettings | None = None) -> tuple[int, int]:
    """(prompt tokens, target tokens) of one example; for multi-turn (total - target, target)."""
    if multi_turn:
        ids, mask = tokenize_multiturn(tokenizer, ex["messages"], prompt_settings)
        return len(ids) - sum(mask), sum(mask)
    prompt, completion = split_last_turn(ex["messages"])
    b = build_pair_batch(tokenizer, [prompt], [completion], max_prompt_len=10 ** 9, max_completion_len=10 ** 9,
                         prompt_settings=prompt_settings)
    return b.prompt_lengths[0], b.completion_lengths[0]


def apply_sft_length_policy(examples: list[dict], tokenizer, *, multi_turn: bool, max_prompt_len: int,
                            max_completion_len: int, truncation: str, prompt_settings: PromptSettings | None = None,
                            path: str | None = None) -> tuple[list[dict], dict]:
    """:func:`trainer.data.train_data.truncation_policy` for SFT examples (each kept one gains ``num_tokens``).
    Multi-turn conversations are limited to ``max_prompt_len + max_completion_len`` tokens in total."""
    from trainer.data.train_data import truncation_policy  # deferred: imports numpy

    over = 0

    def measure(ex):
        nonlocal over
        p, c = example_lengths(tokenizer, ex, multi_turn=multi_turn, prompt_settings=prompt_settings)
        long = (p + c > max_prompt_len + max_completion_len) if multi_turn else (p > max_prompt_len or c > max_completion_len)
        over += long
        return {**ex, "num_tokens": p + c}, (f"example {ex['item_id']!r} has {p} prompt and {c} target tokens (data."
                                             f"max_prompt_len={max_prompt_len}, data.max_completion_len="
                                             f"{max_completion_len})", "messages") if long else None

    keep, dropped = truncation_policy(examples, measure, truncation=truncation, path=path, what="SFT example")
    return keep, {"examples": len(keep), "over_max_length": over, "dropped": dropped, "policy": truncation}


def collate_sft(tokenizer, examples: Sequence[dict], *, multi_turn: bool, max_prompt_len: int, max_completion_len: int,
                truncation: str, prompt_settings: PromptSettings | None = None) -> dict:
    """Right-padded ``input_ids, attention_mask, completion_mask`` (long tensors) and ``item_ids``."""
    if not multi_turn:
        prompts, completions = zip(*(split_last_turn(ex["messages"]) for ex in examples))
        b = build_pair_batch(tokenizer, list(prompts), list(completions), max_prompt_len=max_prompt_len,
                             max_completion_len=max_completion_len,
                             truncation="keep_start" if truncation == "keep_start" else "keep_end",
                             prompt_settings=prompt_settings)
        return {"input_ids": b.input_ids, "attention_mask": b.attention_mask, "completion_mask": b.completion_mask,
                "item_ids": [ex["item_id"] for ex in examples]}
    limit = max_prompt_len + max_completion_len
    rows = []
    for ex in examples:
        ids, mask = tokenize_multiturn(tokenizer, ex["messages"], prompt_settings)
        if len(ids) > limit:  # keep the start: the task, the workflow and the first actions
            ids, mask = ids[:limit], mask[:limit]
        mask[0] = 0
        rows.append((ids, mask))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    input_ids, attention, target = right_pad([r for r, _ in rows], [m for _, m in rows], pad)
    return {"input_ids": input_ids, "attention_mask": attention, "completion_mask": target,
            "item_ids": [ex["item_id"] for ex in examples]}


class WindowSource:
    """Wraps a batch source: on the first micro-batch of an optimizer step it draws all ``grad_accum``
    micro-batches and stamps each with ``num_items`` = target tokens of the window (summed over all
    ranks) / (``grad_accum`` × ``world``): TRL's ``num_items_in_batch`` normalisation under the loop's
    ``loss / grad_accum`` and DDP's gradient averaging over ranks, so a 2-rank run equals a 1-rank run
    with the same global batch. ``reduce_sum`` sums a number over ranks (None on one process). The
    state is the inner source's, taken between steps (the queue is then empty)."""

    def __init__(self, inner, *, grad_accum: int, world: int = 1, reduce_sum=None):
        self.inner = inner
        self.grad_accum = grad_accum
        self.world = world
        self.reduce_sum = reduce_sum
        self._queue: list[dict] = []

    @property
    def epoch(self) -> int:
        return self.inner.epoch

    def next_microbatch(self) -> dict:
        if not self._queue:
            window = [self.inner.next_microbatch() for _ in range(self.grad_accum)]
            total = sum(int(mb["completion_mask"].sum()) for mb in window)
            if self.world > 1 and self.reduce_sum is not None:
                total = self.reduce_sum(total)
            for mb in window:
                mb["num_items"] = total / (self.grad_accum * self.world)
            self._queue = window
        return self._queue.pop(0)

    def state_dict(self) -> dict:
        return self.inner.state_dict()

    def load_state_dict(self, state: dict) -> None:
        self._queue = []
        self.inner.load_state_dict(state)


def load_sft_examples(path: str) -> list[dict]:
    """Validate SFT rows and normalise them to ``{"item_id", "messages"}``."""
    real = resolve_data_path(path)
    out = []
    for line, rec in read_records(real):
        if "messages" in rec:
            msgs = rec["messages"]
            if not isinstance(msgs, list) or not msgs:
                raise DataError("expected a non-empty list of {role, content}", path=real, line=line, field="messages")
            for j, m in enumerate(msgs):
                if not isinstance(m, dict) or not isinstance(m.get("role"), str) or not isinstance(m.get("content"), str):
                    raise DataError(f"turn {j} must be an object with string role and content", path=real,
                                    line=line, field=f"messages[{j}]")
            if not any(m["role"] == "assistant" for m in msgs):
                raise DataError("no assistant turn to train on", path=real, line=line, field="messages")
        elif "prompt" in rec and "completion" in rec:
            if not str(rec["completion"]).strip():
                raise DataError("empty completion", path=real, line=line, field="completion")
            msgs = [{"role": "user", "content": str(rec["prompt"])},
                    {"role": "assistant", "content": str(rec["completion"])}]
        else:
            raise DataError("missing field", path=real, line=line, field="messages",
                            accepted="{messages: [...]} or {prompt, completion}")
        out.append({"item_id": str(rec.get("item_id", f"line{line}")), "messages": msgs})
    return out
