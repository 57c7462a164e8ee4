"""In-process Hugging Face generation backend: batched, left-padded, greedy by default.

Trainers hand it their live (possibly LoRA-wrapped) policy, so evaluation and rollouts use the
current weights with no copy. Requests are grouped by (sampling settings) and sorted by prompt length
so that each batch wastes little padding.

Seeded sampling (``temperature > 0`` and ``request.seed`` set) is per row: sample ``j`` of a request
draws its tokens from its own generator seeded with ``derive_seed(seed, j)`` (inverse-CDF sampling of
the temperature/top-p distribution, see :func:`_make_row_sampler`), so requests with different seeds still
share one batch and a sample does not depend on its batch. Greedy requests and unseeded sampling
(``torch``'s global RNG) go through ``generate`` as before.

Each sampled token's log-prob (under the raw, temperature-1 distribution) is recorded during decoding
by :func:`_make_logprob_recorder`, one step at a time: memory scales with the answer, never with
``batch x new tokens x vocabulary`` (``output_logits`` is never requested).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from ..prompts import PromptSettings, request_prompt_ids
from .base import (GenerationBackend, GenerationRequest, GenerationResult, Sample, derive_seed, label_probabilities,
                   label_sequences, truncate_at_stop)

PER_ROW = "per-row"  # group key of seeded sampling: every row carries its own seed, batch freely


def _make_row_sampler(seeds: Sequence[int], max_new_tokens: int, temperature: float, top_p: float, device):
    """A ``LogitsProcessor`` that turns greedy decoding into per-row seeded sampling.

    Each call (one decoding step) applies temperature and top-p (transformers' own warpers, as
    ``do_sample=True`` would), then picks one token per row by inverse-CDF sampling with that row's next
    uniform number, and returns scores that are 0 at the picked token and -inf elsewhere (so the argmax
    of greedy decoding is the sample). Row ``b``'s uniforms are ``torch.rand(max_new_tokens, float64)``
    from a generator seeded with ``seeds[b]``, drawn once: token ``t`` of a row uses its ``t``-th number
    whatever the other rows are.
    """
    import torch
    from transformers import LogitsProcessor, TemperatureLogitsWarper, TopPLogitsWarper

    uniforms = torch.stack([torch.rand(max_new_tokens, dtype=torch.float64,
                                       generator=torch.Generator().manual_seed(int(s))) for s in seeds]).to(device)
    warpers = [TemperatureLogitsWarper(temperature)] + ([TopPLogitsWarper(top_p)] if top_p < 1.0 else [])

    class RowSampler(LogitsProcessor):
        def __init__(self):
            self.step = 0

        def __call__(self, input_ids, scores):
            if self.step >= uniforms.shape[1]:
                raise RuntimeError(f"RowSampler: decoding step {self.step} beyond max_new_tokens={uniforms.shape[1]}")
            scores = scores.float()
            for w in warpers:
                scores = w(input_ids, scores)
            cdf = torch.softmax(scores, dim=-1).to(torch.float64).cumsum(dim=-1)
            u = uniforms[:, self.step:self.step + 1] * cdf[:, -1:]
            pick = torch.searchsorted(cdf, u, right=True).clamp_max(scores.shape[-1] - 1)
            self.step += 1
            return torch.full_like(scores, float("-inf")).scatter_(1, pick, 0.0)

    return RowSampler()


def _make_logprob_recorder():
    """A ``LogitsProcessor`` that records the chosen token's log-prob at every decoding step.

    It must come first among the custom processors: transformers applies its own processors (none for
    our settings) before the custom ones and the sampling warpers (temperature, top-p) after them, so it
    sees the raw logits, as ``output_logits`` would. At step ``t`` it keeps ``log_softmax`` of that
    step's row (``(B, V)``, fp32) and, once the next call shows the token chosen at ``t`` (the last
    column of ``input_ids``), keeps only that token's value (``(B,)``). ``finish(sequences)`` gathers the
    last step from the final sequences and returns ``(B, T)`` log-probs. Peak extra memory: one
    ``(B, V)`` row, whatever the number of new tokens.
    """
    import torch
    from transformers import LogitsProcessor

    class LogprobRecorder(LogitsProcessor):
        def __init__(self):
            self.kept: list = []      # (B,) log-prob of the chosen token, per finished step
            self.pending = None       # (B, V) log_softmax of the step whose choice is not yet known

        def __call__(self, input_ids, scores):
            if self.pending is not None:
                self.kept.append(self.pending.gather(1, input_ids[:, -1:]).squeeze(1))
            self.pending = torch.log_softmax(scores.float(), dim=-1)
            return scores

        def finish(self, sequences):
            if self.pending is not None:
                self.kept.append(self.pending.gather(1, sequences[:, -1:].to(self.pending.device)).squeeze(1))
                self.pending = None
            if not self.kept:
                return torch.zeros(sequences.shape[0], 0)
            return torch.stack(self.kept, dim=1).cpu()

    return LogprobRecorder()


class HFBackend(GenerationBackend):
    name = "hf"

    def __init__(self, model, tokenizer, *, batch_size: int = 32, adapter_path: str | None = None,
                 prompt_settings: PromptSettings | None = None, autocast_dtype=None):
        """``autocast_dtype`` (e.g. ``torch.bfloat16``): generate under ``torch.autocast`` in that dtype (weights
        unchanged; recorded log-probs still computed in fp32). None: the model's own dtype."""
        if adapter_path:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter_path)
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.prompt_settings = prompt_settings or PromptSettings()
        self.autocast_dtype = autocast_dtype

    # -- prompt rendering -------------------------------------------------------------------
    def prompt_ids(self, prompt: str | None = None, messages: list[dict] | None = None) -> list[int]:
        """Token ids a request is generated from (``eval_hooks.prompts.request_prompt_ids``)."""
        return request_prompt_ids(self.tokenizer, self.prompt_settings, prompt=prompt, messages=messages)

    def _encode(self, text: str) -> list[int]:
        return self.tokenizer(text, add_special_tokens=False)["input_ids"]

    @property
    def device(self):
        return next(self.model.parameters()).device

    def _eos_ids(self) -> set[int]:
        eos = self.model.generation_config.eos_token_id
        ids = set(eos if isinstance(eos, list) else [eos] if eos is not None else [])
        if self.tokenizer.eos_token_id is not None:
            ids.add(self.tokenizer.eos_token_id)
        return ids

    # -- generation ---------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerationRequest], *, progress: bool = False,
                 desc: str = "generate") -> list[GenerationResult]:
        from tqdm.auto import tqdm

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
        try:
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
        ``row_seeds`` (sampling only, one per prompt): per-row seeded sampling instead."""
        import torch

        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompt_ids)
        input_ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for row, p in enumerate(prompt_ids):  # left padding
            input_ids[row, width - len(p):] = torch.tensor(p)
            attention[row, width - len(p):] = 1
        from transformers import LogitsProcessorList

        recorder = _make_logprob_recorder()
        processors = LogitsProcessorList([recorder])  # first: it must see the raw logits
        kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=pad, return_dict_in_generate=True,
                      logits_processor=processors)
        if temperature > 0 and row_seeds is not None:
            if len(row_seeds) != len(prompt_ids):
                raise ValueError(f"{len(row_seeds)} row seeds for {len(prompt_ids)} prompts")
            processors.append(_make_row_sampler(row_seeds, max_new_tokens, temperature, top_p, self.device))
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        elif temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if stop:
            kwargs.update(stop_strings=list(stop), tokenizer=self.tokenizer)
        if seed is not None:
            torch.manual_seed(seed)
        autocast = torch.autocast(self.device.type, dtype=self.autocast_dtype or torch.float32,
                                  enabled=self.autocast_dtype is not None)
        with torch.no_grad(), autocast:
            out = self.model.generate(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device),
                                      **kwargs)
        new = out.sequences[:, width:].cpu()
        logp = recorder.finish(out.sequences)  # (B, T_new): raw (temperature-1) log-prob of each new token
        eos = self._eos_ids()
        results = []
        for row in range(new.shape[0]):
            ids = new[row].tolist()
            n_keep, finish = len(ids), "length"
            for t, tid in enumerate(ids):
                if tid in eos:
                    n_keep, finish = t + 1, "stop"
                    break
            ids = ids[:n_keep]
            text = self.tokenizer.decode([t for t in ids if t not in eos], skip_special_tokens=True)
            text, hit = truncate_at_stop(text, stop)
            results.append(Sample(text=text, token_ids=ids, logprobs=logp[row, :n_keep].tolist(),
                                  finish_reason="stop" if hit else finish))
        return results

    # -- label scoring -------------------------------------------------------------------------
    def score_labels(self, prompts: Sequence[str | list[dict]], labels: Sequence[str]) -> list[dict[str, float]]:
        import torch

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
