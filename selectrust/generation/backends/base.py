"""The generation-backend interface shared by evaluation, pair mining and RL rollouts.

Three implementations speak it, each registered by name in the package's ``BACKENDS`` with its settings, factory
and capabilities (``spec``): the in-process Hugging Face backend (``hf``), the HTTP client for a vLLM server (``vllm_server``;
also, as declared flavours, llama.cpp's and other plain ``/v1/completions`` servers, text only) and, through
that client, the loopback reference server used in CPU tests; plus ``openai_chat``, a client of any
OpenAI-compatible ``/v1/chat/completions`` endpoint (judges, mining, evaluation of served models; text only, no
token ids, first-token top_logprobs only). ``transport`` is their shared HTTP layer (deadlines, size bounds,
errors). Callers build :class:`GenerationRequest` objects and never branch on the backend kind; what a backend
can do is asked of the registry (``selectrust.generation.backends.capabilities``).
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Sequence


def derive_seed(*parts: int | str) -> int:
    """A 31-bit seed that is a stable hash of ``parts`` (same value in every process and Python run)."""
    blob = "/".join(str(p) for p in parts).encode()
    return int.from_bytes(hashlib.sha256(blob).digest()[:4], "big") & 0x7FFFFFFF


@dataclass
class GenerationRequest:
    """One prompt to complete ``n`` times.

    Exactly one of ``prompt`` (raw text, sent as is) and ``messages`` (chat turns, rendered with the
    tokenizer's chat template plus the generation prompt) is set. ``temperature == 0`` means greedy.
    ``adapter`` names a LoRA adapter known to the backend (server backends); ``None`` = current weights.

    ``seed`` (sampling only; ignored when greedy): the request's own random stream. The in-process HF
    backend and the reference server draw sample ``j`` from a generator seeded with
    ``derive_seed(seed, j)``, so a sample depends on (weights, prompt, seed, j) and not on which other
    requests share its batch; vLLM seeds the request with it. Requests with the same prompt and seed
    therefore get the same samples: give every independent draw its own seed. ``None``: the backend's
    global RNG (HF: ``torch``'s, batch-dependent).
    """

    prompt: str | None = None
    messages: list[dict] | None = None
    n: int = 1
    max_new_tokens: int = 64
    temperature: float = 0.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    adapter: str | None = None

    def __post_init__(self) -> None:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("GenerationRequest needs exactly one of prompt= or messages=")
        if self.n < 1:
            raise ValueError(f"GenerationRequest.n must be >= 1, got {self.n}")


@dataclass
class Sample:
    """One completion. ``logprobs[t]`` is log p(token_ids[t]) under the sampling distribution's
    logits at temperature 1 (the policy's own log-prob, what RL importance ratios need)."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str  # "stop" (EOS or stop string) | "length"
    #: the server sent no text at all (a chat reply with ``content: null``); ``text`` is then ""
    null_content: bool = False


@dataclass
class GenerationResult:
    request: GenerationRequest
    samples: list[Sample]
    prompt_token_ids: list[int] = field(default_factory=list)


class GenerationBackend(ABC):
    """Generate completions and score candidate labels. Implementations must return exactly
    ``request.n`` samples per request, in request order, or raise."""

    name: str = "base"

    @abstractmethod
    def generate(self, requests: Sequence[GenerationRequest], *, progress: bool = False,
                 desc: str = "generate") -> list[GenerationResult]:
        ...

    @abstractmethod
    def score_labels(self, prompts: Sequence[str | list[dict]], labels: Sequence[str]) -> list[dict[str, float]]:
        """For each prompt, the probability of each label, normalised over ``labels``: the summed
        token log-probs of the label text as a continuation of the (chat-rendered) prompt,
        soft-maxed across labels."""

    def load_adapter(self, path: str, version: str) -> None:  # pragma: no cover - server backends
        raise NotImplementedError(f"backend {self.name!r} does not load adapters")

    def identity(self) -> dict | None:
        """What makes this backend's answers its own (model, server, weights), JSON-able: an evaluation's saved
        responses (:mod:`selectrust.generation.response_log`) are reused only under the same identity. None (this default):
        unknown, so saved responses are never reused."""
        return None

    def close(self) -> None:
        """Release resources (server connections, processes)."""


def label_sequences(backend, prompts: Sequence[str | list[dict]], labels: Sequence[str]):
    """The ``score_labels`` inputs of every backend: ``prompt_ids + label_ids`` for each prompt (outer) and label
    (inner), with each sequence's prompt and label lengths. ``backend`` provides ``prompt_ids`` and ``_encode``.

    Returns ``(seqs, prompt_lens, label_lens)``, three lists of length ``len(prompts) * len(labels)``."""
    label_ids = [backend._encode(lab) for lab in labels]
    seqs, prompt_lens, label_lens = [], [], []
    for p in prompts:
        pids = backend.prompt_ids(messages=p) if isinstance(p, list) else backend.prompt_ids(prompt=p)
        for lid in label_ids:
            seqs.append(pids + lid)
            prompt_lens.append(len(pids))
            label_lens.append(len(lid))
    return seqs, prompt_lens, label_lens


def label_probabilities(scores: Sequence[float], labels: Sequence[str]) -> list[dict[str, float]]:
    """Summed label log-probs (prompt-major, as :func:`label_sequences` orders them) -> per prompt, the softmax
    across ``labels`` (in float64)."""
    out, k = [], len(labels)
    for i in range(0, len(scores), k):
        row = scores[i:i + k]
        m = max(row)
        z = sum(math.exp(s - m) for s in row)
        out.append({lab: math.exp(s - m) / z for lab, s in zip(labels, row)})
    return out


def truncate_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """Cut ``text`` at the earliest stop string (the stop string itself is removed)."""
    cut = len(text)
    for s in stop:
        if s:
            i = text.find(s)
            if i != -1:
                cut = min(cut, i)
    return text[:cut], cut < len(text)


class GreedyMemo(GenerationBackend):
    """A backend over fixed weights that answers each greedy request once: a request with ``temperature == 0``,
    ``n == 1`` and no adapter that asks again for a (prompt or messages, budget, stop strings) it already answered
    gets the same sample back without generating. Everything else goes to ``inner``, and every other attribute
    is ``inner``'s.

    For a run whose weights do not change between calls, e.g. an evaluation with a knowledge estimate of
    ``k == 1`` (its greedy clean answers are the evaluation's clean rows) or knowledge-aware mining. Never wrap a
    backend over a policy that is being trained: a memo would return answers of older weights."""

    def __init__(self, inner: GenerationBackend):
        self.inner = inner
        self.name = inner.name
        self.memo: dict[tuple, tuple[Sample, list[int]]] = {}  # key -> (sample, prompt token ids)
        self.hits = 0

    def __getattr__(self, attr):  # only called for attributes not found on the memo itself
        return getattr(self.__dict__["inner"], attr)

    @staticmethod
    def _key(r: GenerationRequest) -> tuple | None:
        if r.temperature != 0 or r.n != 1 or r.adapter is not None:
            return None
        chat = None if r.messages is None else repr(r.messages)
        return r.prompt, chat, r.max_new_tokens, tuple(r.stop)

    def generate(self, requests: Sequence[GenerationRequest], *, progress: bool = False,
                 desc: str = "generate") -> list[GenerationResult]:
        keys = [self._key(r) for r in requests]
        todo = [i for i, k in enumerate(keys) if k is None or k not in self.memo]
        fresh = dict(zip(todo, self.inner.generate([requests[i] for i in todo], progress=progress, desc=desc)))
        out = []
        for i, (r, k) in enumerate(zip(requests, keys)):
            if i in fresh:
                res = fresh[i]
                if k is not None:
                    self.memo[k] = (res.samples[0], res.prompt_token_ids)
            else:
                self.hits += 1
                sample, ids = self.memo[k]
                res = GenerationResult(request=r, samples=[sample], prompt_token_ids=ids)
            out.append(res)
        return out

    def score_labels(self, prompts: Sequence[str | list[dict]], labels: Sequence[str]) -> list[dict[str, float]]:
        return self.inner.score_labels(prompts, labels)

    def load_adapter(self, path: str, version: str) -> None:
        raise NotImplementedError("GreedyMemo serves fixed weights; load the adapter into a backend without a memo")

    def identity(self) -> dict | None:
        return self.inner.identity()

    def close(self) -> None:
        self.inner.close()
