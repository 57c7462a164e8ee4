"""Log-probabilities of completions under a causal LM, and the tokenised (prompt, completion) batch.

Public API (names are stable):

- ``token_logprobs(logits, labels, mask=None, *, temperature=1.0, chunk_rows=None) -> Tensor (B, T)``
- ``token_entropy(logits, mask=None, *, temperature=1.0) -> Tensor (B, T)``
- ``sequence_logprobs(model, input_ids, attention_mask, completion_mask, *, temperature=1.0,
  return_entropy=False, trim_prompt_logits=True, logprob_chunk=0) -> (seq_logps (B,), token_logps (B, T), entropy (B, T) | None)``
- ``build_pair_batch(tokenizer, prompts, completions, *, max_prompt_len, max_completion_len,
  truncation="keep_end", prompt_settings=None, add_eos=True) -> PairBatch``
- ``build_preference_batch(tokenizer, prompts, chosen, rejected, **same) -> PairBatch`` (rows
  ``[chosen_0..chosen_{n-1}, rejected_0..rejected_{n-1}]``, the layout TRL uses)
- ``PairBatch``: ``input_ids, attention_mask, completion_mask`` (``(N, T)`` long, right-padded),
  ``prompt_truncated, completion_truncated`` (``(N,)`` bool), ``.stats``, ``.model_inputs()``, ``.to(device)``

Alignment: ``token_logps[b, t] = log p(input_ids[b, t] | input_ids[b, :t])``, aligned with ``input_ids``
and ``completion_mask`` (column 0 is always 0). This differs from TRL, whose per-token tensors are the
shifted ``(B, T-1)``.

``torch``/``transformers`` are imported lazily so that data-only code can import this module cheaply.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from selectrust.generation.prompts import PromptSettings, render_prompt

__all__ = [
    "token_logprobs",
    "token_entropy",
    "sequence_logprobs",
    "PairBatch",
    "build_pair_batch",
    "build_preference_batch",
    "right_pad",
    "TRUNCATION_MODES",
]

TRUNCATION_MODES = ("keep_end", "keep_start", "error")


# ---------------------------------------------------------------------------------------------------------------------
# Tensor functions
# ---------------------------------------------------------------------------------------------------------------------


def token_logprobs(logits, labels, mask=None, *, temperature: float = 1.0, chunk_rows: int | None = None):
    """Log-prob of each label: ``logits[b, t, labels[b, t]] / T - logsumexp_v(logits[b, t, v] / T)``.

    Shapes: ``logits (B, T, V)`` aligned with ``labels (B, T)`` (``logits[:, t]`` is the distribution of
    ``labels[:, t]``); ``mask (B, T)`` or None. Returns ``(B, T)`` in float32 (or float64 for float64
    logits), zero where ``mask`` is 0 or the label is negative (``-100``).

    Memory: gather + logsumexp instead of ``log_softmax`` (no second ``(B, T, V)`` output tensor);
    ``chunk_rows`` processes that many rows at a time, bounding the float32 upcast of half-precision
    logits to ``chunk_rows * T * V``. Gradients flow into ``logits``.
    """
    import torch  # deferred: imports torch

    if logits.dim() != 3 or logits.shape[:2] != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)} must be (B, T, V) aligned with labels {tuple(labels.shape)}")
    valid = labels >= 0
    if mask is not None:
        if mask.shape != labels.shape:
            raise ValueError(f"mask {tuple(mask.shape)} must match labels {tuple(labels.shape)}")
        valid = valid & mask.bool()
    safe = labels.clamp_min(0).unsqueeze(-1)
    out_dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    step = logits.shape[0] if not chunk_rows else max(1, int(chunk_rows))
    pieces = []
    for start in range(0, logits.shape[0], step):
        chunk = logits[start:start + step].to(out_dtype)
        if temperature != 1.0:
            chunk = chunk / temperature
        picked = chunk.gather(-1, safe[start:start + step]).squeeze(-1)
        pieces.append(picked - torch.logsumexp(chunk, dim=-1))
    out = torch.cat(pieces, dim=0) if len(pieces) > 1 else pieces[0]
    return torch.where(valid, out, torch.zeros_like(out))


def token_entropy(logits, mask=None, *, temperature: float = 1.0):
    """Entropy ``-sum_v p log p`` of each next-token distribution; ``(B, T, V) -> (B, T)``, float32, detached,
    zero where ``mask`` is 0."""
    import torch  # deferred: imports torch

    with torch.no_grad():
        x = logits.detach().float()
        if temperature != 1.0:
            x = x / temperature
        logp = torch.log_softmax(x, dim=-1)
        ent = -(logp.exp() * logp).sum(-1)
        if mask is not None:
            ent = ent * mask.to(ent.dtype)
        return ent


def sequence_logprobs(
    model,
    input_ids,
    attention_mask,
    completion_mask,
    *,
    temperature: float = 1.0,
    return_entropy: bool = False,
    trim_prompt_logits: bool = True,
    logprob_chunk: int = 0,
):
    """Summed log-prob of the completion tokens of each (prompt + completion) sequence.

    Shapes: ``input_ids, attention_mask, completion_mask``: ``(B, T)``; completion tokens are the
    positions with ``completion_mask == 1`` (they must be real tokens, never the first column).
    Returns ``seq_logps (B,)`` = ``sum_t token_logps[:, t]``, ``token_logps (B, T)`` aligned with
    ``input_ids`` (zero outside the completion) and ``entropy (B, T)`` (detached, zero outside the
    completion) or None.

    Padding: right- or left-padded batches both work: position ids are computed from
    ``attention_mask`` (``cumsum - 1``), so a left-padded row gets the same positions as unpadded.
    (A plain HF forward without position ids would shift left-padded rows by their pad count.)

    Memory: with ``trim_prompt_logits`` only the last ``T - s + 1`` positions are projected to the
    vocabulary (``logits_to_keep``), where ``s`` is the earliest completion start in the batch, so
    long prompts cost no ``(T, V)`` logits. Models whose forward lacks ``logits_to_keep`` need
    ``trim_prompt_logits=False``. ``logprob_chunk > 0`` (``model.logprob_chunk``) never builds the
    ``(B, T, V)`` logits: see ``trainer.logprobs.chunked_logprobs`` (same outputs within float32 round-off).
    """
    import torch  # deferred: imports torch

    if input_ids.shape != attention_mask.shape or input_ids.shape != completion_mask.shape:
        raise ValueError(f"input_ids {tuple(input_ids.shape)}, attention_mask {tuple(attention_mask.shape)} and "
                         f"completion_mask {tuple(completion_mask.shape)} must all be (B, T)")
    comp = completion_mask.bool()
    if bool(comp[:, 0].any()):
        raise ValueError("completion_mask marks column 0: the first token has no context to be predicted from")
    if bool((comp & ~attention_mask.bool()).any()):
        raise ValueError("completion_mask marks padding positions (attention_mask == 0)")
    if logprob_chunk:
        from trainer.logprobs.chunked_logprobs import sequence_logprobs_chunked

        return sequence_logprobs_chunked(model, input_ids, attention_mask, completion_mask, chunk=logprob_chunk,
                                         temperature=temperature, return_entropy=return_entropy)

    batch, seq_len = input_ids.shape
    position_ids = (attention_mask.long().cumsum(-1) - 1).clamp_min(0)
    kwargs: dict[str, Any] = {"input_ids": input_ids, "attention_mask": attention_mask,
                              "position_ids": position_ids, "use_cache": False}
    start = 1
    if trim_prompt_logits and bool(comp.any()):
        start = int(comp.float().argmax(dim=1)[comp.any(dim=1)].min().item())
        kwargs["logits_to_keep"] = seq_len - start + 1  # logits at positions start-1 .. T-1
    logits = model(**kwargs).logits
    if "logits_to_keep" not in kwargs:
        logits = logits[:, start - 1:]
    # logits[:, j] (j < last) predicts input_ids[:, start + j]
    logits = logits[:, :-1]
    labels = input_ids[:, start:]
    window_mask = comp[:, start:]
    lp = token_logprobs(logits, labels, window_mask, temperature=temperature)
    token_logps = torch.zeros((batch, seq_len), dtype=lp.dtype, device=lp.device)
    token_logps = torch.cat([token_logps[:, :start], lp], dim=1)
    entropy = None
    if return_entropy:
        ent = token_entropy(logits, window_mask, temperature=temperature)
        entropy = torch.cat([torch.zeros((batch, start), dtype=ent.dtype, device=ent.device), ent], dim=1)
    return token_logps.sum(dim=1), token_logps, entropy


# ---------------------------------------------------------------------------------------------------------------------
# Tokenised batches
# ---------------------------------------------------------------------------------------------------------------------


@dataclass
class PairBatch:
    """Right-padded (prompt + completion) rows. ``completion_mask`` marks completion tokens (incl. EOS)."""

    input_ids: Any
    attention_mask: Any
    completion_mask: Any
    prompt_truncated: Any
    completion_truncated: Any
    prompt_lengths: list[int] = field(default_factory=list)
    completion_lengths: list[int] = field(default_factory=list)

    @property
    def stats(self) -> dict[str, int]:
        return {
            "num_rows": int(self.input_ids.shape[0]),
            "num_prompts_truncated": int(self.prompt_truncated.sum()),
            "num_completions_truncated": int(self.completion_truncated.sum()),
            "max_length": int(self.input_ids.shape[1]),
        }

    def model_inputs(self) -> dict[str, Any]:
        return {"input_ids": self.input_ids, "attention_mask": self.attention_mask}

    def to(self, device) -> PairBatch:
        return PairBatch(self.input_ids.to(device), self.attention_mask.to(device), self.completion_mask.to(device),
                         self.prompt_truncated.to(device), self.completion_truncated.to(device),
                         list(self.prompt_lengths), list(self.completion_lengths))


def right_pad(rows: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], pad_id: int):
    """Right-pad token rows and their target masks (each as long as its row): ``(input_ids,
    attention_mask, target_mask)``, each ``(N, max_len)`` long (``torch.nn.utils.rnn.pad_sequence``).
    The one padding routine of SFT, DPO and rollout batches."""
    import torch  # deferred: imports torch
    from torch.nn.utils.rnn import pad_sequence  # deferred: imports torch

    def pad(seqs, value: int):
        return pad_sequence([torch.as_tensor(s, dtype=torch.long) for s in seqs], batch_first=True, padding_value=value)

    return pad(rows, pad_id), pad([[1] * len(r) for r in rows], 0), pad(masks, 0)


def _check_pair_args(prompts: Sequence, completions: Sequence, *, truncation: str, max_prompt_len: int,
                     max_completion_len: int) -> None:
    """:func:`build_pair_batch`'s argument checks: ValueError on the first that fails."""
    if truncation not in TRUNCATION_MODES:
        raise ValueError(f"truncation must be one of {TRUNCATION_MODES}; got {truncation!r}")
    if len(prompts) != len(completions):
        raise ValueError(f"{len(prompts)} prompts but {len(completions)} completions; they must pair up")
    if len(prompts) == 0:
        raise ValueError("build_pair_batch got no rows")
    if max_prompt_len < 1 or max_completion_len < 1:
        raise ValueError(f"max_prompt_len and max_completion_len must be >= 1; got {max_prompt_len}, "
                         f"{max_completion_len}")


def _pair_row(tokenizer, i: int, prompt, completion, settings: PromptSettings, *, eos: int | None, truncation: str,
              max_prompt_len: int, max_completion_len: int) -> tuple[list[int], list[int], bool, bool]:
    """Row ``i`` of :func:`build_pair_batch`: ``(prompt ids, completion ids, prompt cut, completion cut)``, the
    completion ending in ``eos`` unless that is None (no EOS wanted on this row) or it already does."""
    p_ids = render_prompt(tokenizer, prompt, settings)
    if not isinstance(completion, str):
        raise TypeError(f"row {i}: completion must be a string; got {type(completion).__name__}")
    c_ids = list(tokenizer(completion, add_special_tokens=False)["input_ids"])
    if eos is not None and (not c_ids or c_ids[-1] != eos):
        c_ids.append(eos)
    if not c_ids:
        raise ValueError(f"row {i}: empty completion (and add_eos=False): nothing to score")
    if not p_ids:
        raise ValueError(f"row {i}: empty prompt: the first completion token would have no context")
    too_long_p, too_long_c = len(p_ids) > max_prompt_len, len(c_ids) > max_completion_len
    if truncation == "error" and (too_long_p or too_long_c):
        raise ValueError(f"row {i}: prompt has {len(p_ids)} tokens (max_prompt_len={max_prompt_len}) and "
                         f"completion has {len(c_ids)} (max_completion_len={max_completion_len}); "
                         "shorten the row or use truncation='keep_end' / 'keep_start'")
    if too_long_p:
        p_ids = p_ids[-max_prompt_len:] if truncation == "keep_end" else p_ids[:max_prompt_len]
    if too_long_c:
        c_ids = c_ids[:max_completion_len]
    return p_ids, c_ids, too_long_p, too_long_c


def build_pair_batch(
    tokenizer,
    prompts: Sequence[str | list[dict[str, str]]],
    completions: Sequence[str],
    *,
    max_prompt_len: int,
    max_completion_len: int,
    truncation: str = "keep_end",
    prompt_settings: PromptSettings | None = None,
    add_eos: bool = True,
    cut_off: Sequence[bool] | None = None,
) -> PairBatch:
    """Tokenise (prompt, completion) rows into one right-padded batch with a completion mask.

    - Prompt: a string (one user turn) or a list of chat messages, rendered to ids by the one renderer
      :func:`selectrust.generation.prompts.render_prompt` under ``prompt_settings`` (the ``prompt`` config group:
      template switch, system prompt, prefix, template kwargs; default ``PromptSettings()``), exactly
      as the generation backends render it.
    - Completion: tokenised on its own (no special tokens), then ``eos_token_id`` appended when
      ``add_eos`` and it does not already end with it, except on rows flagged in ``cut_off`` (a generation cut
      off by its token budget, ``finish_reason == "length"``: giving it an EOS would teach the model to stop
      mid-answer). Tokenising prompt and completion separately is
      what a model sees when it generates the completion after the prompt (a BPE merge across the
      boundary can make this differ from tokenising the concatenated text, as TRL does).
    - Truncation (``truncation``): ``"keep_end"`` cuts an overlong prompt from the left (keeps the
      question and generation prompt next to the completion), ``"keep_start"`` cuts it from the right;
      in both modes an overlong completion is cut from the right (keeping its start; it then has no
      EOS, which is why it is flagged). ``"error"`` raises on the first overlong row, naming it.
      ``prompt_truncated`` / ``completion_truncated`` and ``.stats`` report what was cut.

    Rows are right-padded with ``pad_token_id`` (falling back to ``eos_token_id``), the layout
    ``sequence_logprobs`` and TRL's ``DataCollatorForPreference`` use.
    """
    import torch  # deferred: imports torch

    _check_pair_args(prompts, completions, truncation=truncation, max_prompt_len=max_prompt_len,
                     max_completion_len=max_completion_len)
    eos = tokenizer.eos_token_id
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos
    settings = prompt_settings or PromptSettings()
    if add_eos and eos is None:
        raise ValueError("add_eos=True but the tokenizer has no eos_token_id")

    rows, masks, p_trunc, c_trunc, p_lens, c_lens = [], [], [], [], [], []
    for i, (prompt, completion) in enumerate(zip(prompts, completions)):
        row_eos = eos if add_eos and not (cut_off is not None and cut_off[i]) else None
        p_ids, c_ids, too_long_p, too_long_c = _pair_row(tokenizer, i, prompt, completion, settings, eos=row_eos,
                                                         truncation=truncation, max_prompt_len=max_prompt_len,
                                                         max_completion_len=max_completion_len)
        rows.append(p_ids + c_ids)
        masks.append([0] * len(p_ids) + [1] * len(c_ids))
        p_trunc.append(too_long_p)
        c_trunc.append(too_long_c)
        p_lens.append(len(p_ids))
        c_lens.append(len(c_ids))

    input_ids, attention_mask, completion_mask = right_pad(rows, masks, pad)
    return PairBatch(input_ids, attention_mask, completion_mask,
                     torch.tensor(p_trunc, dtype=torch.bool), torch.tensor(c_trunc, dtype=torch.bool), p_lens, c_lens)


def build_preference_batch(
    tokenizer,
    prompts: Sequence[str | list[dict[str, str]]],
    chosen: Sequence[str],
    rejected: Sequence[str],
    *,
    chosen_cut: Sequence[bool] | None = None,
    rejected_cut: Sequence[bool] | None = None,
    **kwargs,
) -> PairBatch:
    """``build_pair_batch`` over ``[prompts; prompts]`` and ``[chosen; rejected]``: rows ``0..n-1`` are the
    chosen completions and ``n..2n-1`` the rejected ones (split the results with ``.chunk(2)``).
    ``chosen_cut`` / ``rejected_cut``: completions cut off by a generation budget (no EOS is appended to them).
    Other keyword arguments are those of :func:`build_pair_batch`."""
    if not (len(prompts) == len(chosen) == len(rejected)):
        raise ValueError(f"prompts, chosen and rejected must have equal lengths; got {len(prompts)}, "
                         f"{len(chosen)}, {len(rejected)}")
    n = len(prompts)
    cut = list(chosen_cut or [False] * n) + list(rejected_cut or [False] * n)
    return build_pair_batch(tokenizer, list(prompts) + list(prompts), list(chosen) + list(rejected),
                            cut_off=cut, **kwargs)
