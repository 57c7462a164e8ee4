"""In-process Hugging Face generation backend: batched, left-padded, greedy by default.

Trainers hand it their live (possibly LoRA-wrapped) policy, so evaluation and rollouts use the
current weights with no copy. Requests are grouped by (sampling settings) and sorted by prompt length
so that each batch wastes little padding.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Sequence

from .base import GenerationBackend, GenerationRequest, GenerationResult, Sample, truncate_at_stop


class HFBackend(GenerationBackend):
    name = "hf"

    def __init__(self, model, tokenizer, *, batch_size: int = 32, adapter_path: str | None = None,
                 use_chat_template: bool = True):
        if adapter_path:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, adapter_path)
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.use_chat_template = use_chat_template and getattr(tokenizer, "chat_template", None) is not None

    # -- prompt rendering -------------------------------------------------------------------
    def render(self, prompt: str | None = None, messages: list[dict] | None = None) -> str:
        if messages is None:
            return prompt  # raw prompts are sent as is
        if not self.use_chat_template:
            return "\n".join(m["content"] for m in messages) + "\n"
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

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
        prompts = [self._encode(self.render(r.prompt, r.messages)) for r in requests]
        groups: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
        for i, r in enumerate(requests):
            key = (r.max_new_tokens, float(r.temperature), float(r.top_p), tuple(r.stop), r.seed)
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
                        top_p: float, stop: tuple[str, ...], seed: int | None) -> list[Sample]:
        import torch

        pad = self.tokenizer.pad_token_id
        width = max(len(p) for p in prompt_ids)
        input_ids = torch.full((len(prompt_ids), width), pad, dtype=torch.long)
        attention = torch.zeros_like(input_ids)
        for row, p in enumerate(prompt_ids):  # left padding
            input_ids[row, width - len(p):] = torch.tensor(p)
            attention[row, width - len(p):] = 1
        kwargs = dict(max_new_tokens=max_new_tokens, pad_token_id=pad, return_dict_in_generate=True,
                      output_logits=True)
        if temperature > 0:
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0)
        else:
            kwargs.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        if stop:
            kwargs.update(stop_strings=list(stop), tokenizer=self.tokenizer)
        if seed is not None:
            torch.manual_seed(seed)
        with torch.no_grad():
            out = self.model.generate(input_ids=input_ids.to(self.device), attention_mask=attention.to(self.device),
                                      **kwargs)
        new = out.sequences[:, width:].cpu()
        logits = torch.stack(out.logits, dim=1).float().cpu()  # (B, T_new, V), raw (temperature-1) logits
        logp = torch.log_softmax(logits, dim=-1).gather(-1, new.unsqueeze(-1)).squeeze(-1)
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

        label_ids = [self._encode(l) for l in labels]
        seqs, spans = [], []
        for p in prompts:
            text = self.render(messages=p) if isinstance(p, list) else self.render(prompt=p)
            pids = self._encode(text)
            for lid in label_ids:
                seqs.append(pids + lid)
                spans.append((len(pids), len(lid)))
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
        out = []
        k = len(labels)
        for i in range(len(prompts)):
            row = torch.tensor(scores[i * k:(i + 1) * k])
            probs = torch.softmax(row, dim=0).tolist()
            out.append(dict(zip(labels, probs)))
        return out
