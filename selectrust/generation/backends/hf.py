"""In-process Hugging Face generation backend: batched, left-padded, greedy by default.

Trainers hand it their live (possibly LoRA-wrapped) policy, so evaluation and rollouts use the
current weights with no copy. Requests are grouped by (sampling settings) and sorted by prompt length
so that each batch wastes little padding.

Decoding is our own loop (:func:`_decode`) rather than ``model.generate``: the batch's common prompt prefix
runs once, and a row that finishes leaves the batch with its KV cache rows, so a batch of short answers of mixed
length costs what its unfinished rows need.

Seeded sampling (``temperature > 0`` and ``request.seed`` set) is per row: sample ``j`` of a request
draws its tokens from its own generator seeded with ``derive_seed(seed, j)`` (inverse-CDF sampling of
the temperature/top-p distribution, see :func:`_token_picker`), so requests with different seeds still
share one batch and a sample does not depend on its batch. Unseeded sampling draws from ``torch``'s global
RNG as ``generate(do_sample=True)`` does.

Each sampled token's log-prob (under the raw, temperature-1 distribution) is recorded during decoding,
one step at a time: memory scales with the answer, never with ``batch x new tokens x vocabulary``.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Sequence

from selectrust.model import load_model, load_tokenizer, resolve_mixed_precision
from selectrust.model.precision import autocast_dtype

from ..prompts import PromptSettings, request_prompt_ids
from .base import (GenerationBackend, GenerationRequest, GenerationResult, Sample, derive_seed, label_probabilities,
                   label_sequences, truncate_at_stop)
from .spec import BackendSpec, BuildContext, Capabilities, check_positive, setting
import inspect
from selectrust.model.merged_lora import lora_merged

PER_ROW = "per-row"  # group key of seeded sampling: every row carries its own seed, batch freely


def _token_picker(temperature: float, top_p: float, row_seeds: Sequence[int] | None, max_new_tokens: int, device):
    """``pick(logits, rows, step) -> tokens``: the next token of each row still decoding.

    ``logits``: ``(b, V)`` fp32 raw logits of the rows ``rows`` (their indices in the original batch, ``(b,)``)
    at decoding step ``step``; returns ``(b,)`` token ids.

    - ``temperature == 0``: greedy (argmax).
    - ``row_seeds`` given: per-row seeded sampling. Temperature and top-p are applied (transformers' own warpers,
      as ``do_sample=True`` would), then each row picks by inverse-CDF sampling with its ``step``-th uniform
      number. Row ``r``'s uniforms are ``torch.rand(max_new_tokens, float64)`` from a generator seeded with
      ``row_seeds[r]``, drawn once, so a row's tokens do not depend on the other rows of its batch.
    - otherwise: ``torch.multinomial`` on torch's global RNG, as ``generate(do_sample=True)`` samples.
    """
    import torch  # deferred: imports torch

    if temperature <= 0:
        return lambda logits, rows, step: logits.argmax(dim=-1)
    from transformers import TemperatureLogitsWarper, TopPLogitsWarper  # deferred: imports torch, transformers

    warpers = [TemperatureLogitsWarper(temperature)] + ([TopPLogitsWarper(top_p)] if top_p < 1.0 else [])

    def warp(logits):
        for w in warpers:
            logits = w(None, logits)
        return logits

    if row_seeds is None:
        return lambda logits, rows, step: torch.multinomial(torch.softmax(warp(logits), dim=-1), 1).squeeze(1)
    uniforms = torch.stack([torch.rand(max_new_tokens, dtype=torch.float64,
                                       generator=torch.Generator().manual_seed(int(s))) for s in row_seeds]).to(device)

    def pick(logits, rows, step):
        if step >= uniforms.shape[1]:
            raise RuntimeError(f"decoding step {step} beyond max_new_tokens={uniforms.shape[1]}")
        cdf = torch.softmax(warp(logits), dim=-1).to(torch.float64).cumsum(dim=-1)
        u = uniforms[rows, step:step + 1] * cdf[:, -1:]
        return torch.searchsorted(cdf, u, right=True).clamp_max(logits.shape[-1] - 1).squeeze(1)

    return pick


def _forward_names(model) -> tuple[str, bool]:
    """(the forward's KV-cache argument: ``cache`` from transformers 5.2x, ``past_key_values`` before; whether it
    takes ``logits_to_keep``). Read once per model class."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return _forward_names_of(type(base))


@functools.lru_cache(maxsize=None)
def _forward_names_of(cls) -> tuple[str, bool]:
    params = inspect.signature(cls.forward).parameters
    return ("cache" if "cache" in params else "past_key_values"), "logits_to_keep" in params


@contextlib.contextmanager
def _casts_cached(model, enabled: bool):
    """Under ``torch.autocast``, let autocast cache its cast of every floating-point weight, frozen ones too.

    autocast caches the low-precision copy of a weight only for a leaf tensor that requires grad; a frozen weight
    (a peft model's base, a training policy's frozen layers) is cast again at every forward, so at every decoding
    step (SmolLM2 with a frozen adapter, bf16: 6.3 rows/s, 11.3 with the cache). Inside ``torch.no_grad`` nothing
    else reads the flag: it is set on the frozen weights for the block and restored after it, also on an error. The
    cache holds one cast copy of the weights until the autocast block ends (one batch)."""
    frozen = [p for p in model.parameters() if not p.requires_grad and p.is_floating_point()] if enabled else []
    for p in frozen:
        p.requires_grad_(True)
    try:
        yield
    finally:
        for p in frozen:
            p.requires_grad_(False)


MIN_SHARED_PREFIX = 8  # tokens; a shorter common prefix is recomputed per row (one forward pass saves little)


def _shared_prefix(prompt_ids: list[list[int]]) -> int:
    """Length of the prompts' longest common prefix, if at least ``MIN_SHARED_PREFIX`` tokens, else 0; at most the
    shortest prompt's length - 1 (every row keeps one token of its own for the forward pass that reads its logits)."""
    first, limit = prompt_ids[0], min(len(p) for p in prompt_ids) - 1
    k = 0
    while k < limit and all(p[k] == first[k] for p in prompt_ids):
        k += 1
    return k if k >= MIN_SHARED_PREFIX else 0


def _distinct_rows(prompt_ids: list[list[int]]) -> tuple[list[list[int]], list[int]]:
    """The distinct prompts (in first-seen order) and, per row, the index of its prompt among them."""
    first: dict[tuple[int, ...], int] = {}
    of_row = [first.setdefault(tuple(p), len(first)) for p in prompt_ids]
    distinct = [list(p) for p in first]
    return distinct, of_row


def _prompt_pass(model, prompt_ids: list[list[int]], *, pad: int, cache_arg: str, extra: dict):
    """The prompts' forward pass: ``(cache, last logits (b, V) fp32, attention mask, last positions (b, 1))``.
    The batch's common prefix (:func:`_shared_prefix`) runs once and its KV cache is repeated; each row's own tokens
    follow it, left-padded (the padding sits between prefix and row, masked out); positions follow ``generate``'s
    rule for left padding (``cumsum(attention_mask) - 1``)."""
    import torch  # deferred: imports torch

    device = next(model.parameters()).device
    n = len(prompt_ids)
    cache, shared = None, _shared_prefix(prompt_ids) if n > 1 else 0
    if shared:  # the batch's common prefix (a chat template's system turn): computed once, its KV cache repeated
        prefix = torch.tensor([prompt_ids[0][:shared]], device=device)
        cache = getattr(model(input_ids=prefix, use_cache=True, **{cache_arg: None}, **extra), cache_arg)
        if hasattr(cache, "batch_repeat_interleave"):
            cache.batch_repeat_interleave(n)
        else:  # a cache type that cannot be repeated along the batch: every row runs its whole prompt
            cache, shared = None, 0
    width = max(len(p) for p in prompt_ids) - shared
    input_ids = torch.full((n, width), pad, dtype=torch.long)
    mask = torch.zeros((n, shared + width), dtype=torch.long)
    mask[:, :shared] = 1
    for row, p in enumerate(prompt_ids):
        input_ids[row, width - len(p) + shared:] = torch.tensor(p[shared:])
        mask[row, shared + width - len(p) + shared:] = 1
    input_ids, mask = input_ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).clamp_min(0)[:, shared:]
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                **{cache_arg: cache}, **extra)
    return getattr(out, cache_arg), out.logits[:, -1, :].float(), mask, positions[:, -1:]


def _decode(model, prompt_ids: list[list[int]], max_new_tokens: int, pick, *, eos: set[int], pad: int,
            stop_hit=None, compact: bool = True) -> list[tuple[list[int], list[float]]]:
    """Left-padded batched decoding with a KV cache; ``[(token ids, log-probs)]`` per prompt.

    Each step reads one ``(b, V)`` row of logits per unfinished row (``logits_to_keep=1``), keeps the chosen
    token's raw (temperature-1) log-prob in fp32 and never builds ``(B, T, V)``: peak extra memory is one step's
    logits. A row ends at an EOS (kept as its last token), at a stop string (``stop_hit(ids)``) or after
    ``max_new_tokens``. With ``compact``, finished rows leave the batch: their KV cache rows are dropped
    (``DynamicCache.batch_select_indices``), so a step costs what the unfinished rows need.

    The prompts' common prefix (:func:`_shared_prefix`; under a chat template the system turn, 24 of SmolLM2's
    ~45 prompt tokens for a short question) is run once and its KV cache repeated for every row; each row's own
    tokens follow it, left-padded (the padding sits between prefix and row, masked out). Positions follow
    ``generate``'s rule for left padding (``cumsum(attention_mask) - 1``), so every row sees the positions an
    unpadded prompt would. Rows with the same prompt (a request's ``n`` samples, a GRPO group) share one prompt
    forward pass: it runs on the distinct prompts and its KV cache and last logits are repeated for their rows
    (:func:`_distinct_rows`; the prompt pass was about 40% of a GRPO round's generation time, 4 samples of
    30-46-token prompts and 32 new tokens, before this).
    """
    import torch  # deferred: imports torch

    device = next(model.parameters()).device
    cache_arg, keep_arg = _forward_names(model)
    extra = {"logits_to_keep": 1} if keep_arg else {}
    n = len(prompt_ids)
    distinct, of_row = _distinct_rows(prompt_ids)
    cache, logits, mask, positions = _prompt_pass(model, distinct, pad=pad, cache_arg=cache_arg, extra=extra)
    if len(distinct) < n:  # every row gets its prompt's KV cache, logits, mask and positions
        if hasattr(cache, "batch_select_indices"):
            index = torch.tensor(of_row, device=device)
            cache.batch_select_indices(index)
            logits, mask, positions = logits[index], mask[index], positions[index]
        else:  # a cache type that cannot be indexed along the batch: every row runs its prompt
            cache, logits, mask, positions = _prompt_pass(model, prompt_ids, pad=pad, cache_arg=cache_arg, extra=extra)
    out_ids: list[list[int]] = [[] for _ in range(n)]
    out_logp: list[list[float]] = [[] for _ in range(n)]
    rows = torch.arange(n, device=device)     # original index of each row still in the batch
    done = torch.zeros(n, dtype=torch.bool)   # per original row
    eos_t = torch.tensor(sorted(eos), dtype=torch.long, device=device)
    for step in range(max_new_tokens):
        if step:
            out = model(input_ids=step_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                        **{cache_arg: cache}, **extra)
            cache = getattr(out, cache_arg)
            logits = out.logits[:, -1, :].float()
        tokens = pick(logits, rows, step)
        logp = torch.log_softmax(logits, dim=-1).gather(1, tokens.unsqueeze(1)).squeeze(1)
        live = ~done[rows.cpu()]
        finished_now = torch.isin(tokens, eos_t) if len(eos_t) else torch.zeros_like(tokens, dtype=torch.bool)
        for b, (r, t, lp) in enumerate(zip(rows.tolist(), tokens.tolist(), logp.tolist())):
            if not live[b]:
                continue
            out_ids[r].append(t)
            out_logp[r].append(lp)
            if bool(finished_now[b]) or (stop_hit is not None and stop_hit(out_ids[r])):
                done[r] = True
        if bool(done.all()):
            break
        keep = ~done[rows.cpu()]
        if compact and not bool(keep.all()) and hasattr(cache, "batch_select_indices"):
            idx = keep.nonzero().squeeze(1).to(device)
            cache.batch_select_indices(idx)
            rows, tokens, mask, positions = rows[idx], tokens[idx], mask[idx], positions[idx]
        elif not bool(keep.all()):  # finished rows stay (no compaction) and are fed padding, as generate does
            tokens = torch.where(keep.to(device), tokens, torch.full_like(tokens, pad))
        step_ids = tokens.unsqueeze(1)
        mask = torch.cat([mask, torch.ones_like(mask[:, :1])], dim=1)
        positions = positions[:, -1:] + 1
    return list(zip(out_ids, out_logp))


class HFBackend(GenerationBackend):
    name = "hf"

    def __init__(self, model, tokenizer, *, batch_size: int = 32, prompt_settings: PromptSettings | None = None,
                 autocast_dtype=None, merge_lora: bool = True):
        """``model``: a causal LM, or a peft model with its adapter (``trainer.eval_bridge.backend.build_inference_backend``
        loads one after checking it). ``autocast_dtype`` (e.g. ``torch.bfloat16``): generate under
        ``torch.autocast`` in that dtype (weights unchanged; recorded log-probs still computed in fp32). None: the
        model's own dtype. Each weight is cast once per batch, also a frozen one (:func:`_casts_cached`).
        ``merge_lora``: each call generates with the LoRA layers merged into temporary weights
        (:func:`selectrust.model.merged_lora.lora_merged`; the model's own weights are put back untouched)."""
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.prompt_settings = prompt_settings or PromptSettings()
        self.autocast_dtype = autocast_dtype
        self.merge_lora = merge_lora

    # -- prompt rendering -------------------------------------------------------------------
    def prompt_ids(self, prompt: str | None = None, messages: list[dict] | None = None) -> list[int]:
        """Token ids a request is generated from (``selectrust.generation.prompts.request_prompt_ids``)."""
        return request_prompt_ids(self.tokenizer, self.prompt_settings, prompt=prompt, messages=messages)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @property
    def device(self):
        return next(self.model.parameters()).device

    def identity(self) -> dict:
        """The model's name, the generation dtype and a fingerprint of the current weights (per parameter: name,
        shape, dtype and its sum, absolute sum and norm, in float64, rounded to 10 significant digits), so answers
        of weights that changed since (a trained policy) are never taken for these
        (:meth:`GenerationBackend.identity`). Costs one reduction pass over the weights."""
        import torch  # deferred: imports torch

        h = hashlib.sha256()
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                stats = (p.sum(dtype=torch.float64), p.abs().sum(dtype=torch.float64),
                         torch.linalg.vector_norm(p, dtype=torch.float64))
                h.update(f"{name}:{tuple(p.shape)}:{p.dtype}:{','.join(f'{float(v):.10g}' for v in stats)};".encode())
        config = getattr(self.model, "config", None)
        return {"backend": self.name, "model": getattr(config, "_name_or_path", None),
                "tokenizer": getattr(self.tokenizer, "name_or_path", None), "autocast": str(self.autocast_dtype),
                "weights": h.hexdigest()[:16]}

    def _eos_ids(self) -> set[int]:
        eos = self.model.generation_config.eos_token_id
        ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    # -- generation ---------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerationRequest], *, progress: bool = False,
                 desc: str = "generate") -> list[GenerationResult]:
        from tqdm.auto import tqdm  # deferred: imports tqdm

        # Expand to one job per sample; group by sampling settings; sort by length within a group.
        prompts = [self.prompt_ids(r.prompt, r.messages) for r in requests]
        groups: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        for i, r in enumerate(requests):
            per_row = r.seed is not None and r.temperature > 0
            key = (r.max_new_tokens, float(r.temperature), float(r.top_p), tuple(r.stop), PER_ROW if per_row else r.seed)
            groups[key].extend((i, j) for j in range(r.n))
        samples: dict[tuple[int, int], Sample] = {}
        total = sum(len(v) for v in groups.values())
        bar = tqdm(total=total, desc=desc, disable=not progress, unit="sample")
        was_training = self.model.training
        self.model.eval()

        merged = lora_merged(self.model) if self.merge_lora else contextlib.nullcontext()
        try:
            with merged:
                for key, jobs in groups.items():
                    jobs.sort(key=lambda ij: len(prompts[ij[0]]))
                    for start in range(0, len(jobs), self.batch_size):
                        batch = jobs[start:start + self.batch_size]
                        if key[-1] == PER_ROW:
                            out = self._generate_batch([prompts[i] for i, _ in batch], *key[:-1], None,
                                                       row_seeds=[derive_seed(requests[i].seed, j) for i, j in batch])
                        else:
                            out = self._generate_batch([prompts[i] for i, _ in batch], *key)
                        for job, s in zip(batch, out):
                            samples[job] = s
                        bar.update(len(batch))
        finally:
            bar.close()
            if was_training:
                self.model.train()
        return [GenerationResult(request=r, samples=[samples[(i, j)] for j in range(r.n)],
                                 prompt_token_ids=prompts[i]) for i, r in enumerate(requests)]

    def _generate_batch(self, prompt_ids: list[list[int]], max_new_tokens: int, temperature: float,
                        top_p: float, stop: tuple[str, ...], seed: int | None, *,
                        row_seeds: Sequence[int] | None = None) -> list[Sample]:
        """Generate one sample per prompt. ``seed``: ``torch.manual_seed`` before sampling (global RNG);
        ``row_seeds`` (sampling only, one per prompt): per-row seeded sampling instead.

        Departs from ``model.generate`` in two ways (:func:`_decode`): the batch's common prompt prefix runs once,
        and a row that has finished (EOS, or a stop string) leaves the batch with its KV cache rows, so later steps
        cost what the unfinished rows need. Short answers vary in length (SmolLM2's one-line answers: 4-33 tokens,
        mean 13, in batches of 64), so ``generate`` spends about half its decoding steps on rows already done.
        Greedy rows give the tokens ``generate`` gives, up to the last float bits of other GEMM shapes; unseeded
        sampling keeps every row in the batch, so it draws from torch's global RNG exactly as
        ``generate(do_sample=True)`` does."""
        import torch  # deferred: imports torch

        if temperature > 0 and row_seeds is not None and len(row_seeds) != len(prompt_ids):
            raise ValueError(f"{len(row_seeds)} row seeds for {len(prompt_ids)} prompts")
        if seed is not None:
            torch.manual_seed(seed)
        pick = _token_picker(temperature, top_p, row_seeds, max_new_tokens, self.device)
        autocast = torch.autocast(self.device.type, dtype=self.autocast_dtype or torch.float32,
                                  enabled=self.autocast_dtype is not None)
        eos = self._eos_ids()
        with torch.no_grad(), autocast, _casts_cached(self.model, self.autocast_dtype is not None):
            rows = _decode(self.model, prompt_ids, max_new_tokens, pick, eos=eos, pad=self.tokenizer.pad_token_id,
                           stop_hit=self._stop_checker(stop), compact=not (temperature > 0 and row_seeds is None))
        results = []
        for ids, logp in rows:
            finish = "stop" if ids and ids[-1] in eos else "length"
            text = self.tokenizer.decode([t for t in ids if t not in eos], skip_special_tokens=True)
            text, hit = truncate_at_stop(text, stop)
            results.append(Sample(text=text, token_ids=ids, logprobs=logp, finish_reason="stop" if hit else finish))
        return results

    def _stop_checker(self, stop: tuple[str, ...]):
        """``f(token_ids) -> bool``: the decoded new tokens contain a stop string (None without stop strings)."""
        stop = tuple(s for s in stop if s)
        if not stop:
            return None

        def hit(ids: list[int]) -> bool:
            text = self.tokenizer.decode(ids, skip_special_tokens=True)
            return any(s in text for s in stop)

        return hit

    # -- label scoring -------------------------------------------------------------------------
    def score_labels(self, prompts: Sequence[str | list[dict]], labels: Sequence[str]) -> list[dict[str, float]]:
        import torch  # deferred: imports torch

        seqs, prompt_lens, label_lens = label_sequences(self, prompts, labels)
        spans = list(zip(prompt_lens, label_lens))
        scores: list[float] = []
        was_training = self.model.training
        self.model.eval()
        try:
            for start in range(0, len(seqs), self.batch_size):
                chunk, chunk_spans = seqs[start:start + self.batch_size], spans[start:start + self.batch_size]
                width = max(len(s) for s in chunk)
                ids = torch.full((len(chunk), width), self.tokenizer.pad_token_id, dtype=torch.long)
                mask = torch.zeros_like(ids)
                for r, s in enumerate(chunk):  # right padding: positions stay aligned with the prompt
                    ids[r, :len(s)] = torch.tensor(s)
                    mask[r, :len(s)] = 1
                with torch.no_grad():
                    logits = self.model(input_ids=ids.to(self.device), attention_mask=mask.to(self.device)).logits
                logp = torch.log_softmax(logits.float(), dim=-1).cpu()
                for r, (plen, llen) in enumerate(chunk_spans):
                    pos = torch.arange(plen - 1, plen + llen - 1)
                    tgt = ids[r, plen:plen + llen]
                    scores.append(float(logp[r, pos, tgt].sum()))
        finally:
            if was_training:
                self.model.train()
        return label_probabilities(scores, labels)


# ---- registration (selectrust/generation/backends/__init__.py): generation=hf ---------------------------------
@dataclass
class HFSettings:
    """The keys of ``generation=hf``."""

    batch_size: int = setting(32, "Generation batch size of the HF backend.")
    mixed_precision: str = setting("no", "no | bf16 | fp16 (generation under torch.autocast; the recorded log-probs "
                                         "are computed in fp32) | auto (bf16 where the hardware has it, as "
                                         "trainer.mixed_precision=auto).", choices=("no", "bf16", "fp16", "auto"))
    merge_lora: bool = setting(True, "Generate with each LoRA layer merged into a temporary weight (W + scale B A, one "
                                     "matmul per decoding step instead of three; the policy's own weights are put back "
                                     "untouched after each call): the same model up to float rounding. false: the "
                                     "adapter runs beside the weight, as in training.")

    def check(self, group: str) -> None:
        check_positive(self, ("batch_size",), group)


def build(settings: HFSettings, ctx: BuildContext) -> HFBackend:
    """Over ``ctx.model`` (the live policy, with ``ctx.tokenizer``), or standalone over ``ctx.model_path`` loaded
    here (on CUDA when present)."""
    import torch  # deferred: imports torch

    model, tokenizer = ctx.model, ctx.tokenizer
    if model is None:
        tokenizer = load_tokenizer(ctx.model_path)
        model = load_model(ctx.model_path, device="cuda" if torch.cuda.is_available() else "cpu")
    device = next(model.parameters()).device.type
    mp = resolve_mixed_precision(settings.mixed_precision, cpu=device == "cpu")
    dtype = autocast_dtype(mp)
    return HFBackend(model, tokenizer, batch_size=settings.batch_size, prompt_settings=ctx.prompt_settings,
                     autocast_dtype=dtype, merge_lora=settings.merge_lora)


BACKEND = BackendSpec(
    name="hf", settings=HFSettings, factory=build, summary="in-process, current weights",
    capabilities=Capabilities(in_process=True, standalone=True, label_scores=True, sampled_token_ids=True))
