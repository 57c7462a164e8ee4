"""HTTP client backend for any OpenAI-compatible **chat-completions** endpoint (``/v1/chat/completions``).

Hosted judges and generators (and vLLM's own ``/v1/chat/completions`` route) serve chat only, so
this backend sends chat messages and lets the *server* apply its chat template. Standard library
only; no network at import.

API
---
    backend = OpenAIChatBackend("https://api.example.com/v1", "judge-model", api_key_env="JUDGE_API_KEY",
                                timeout_s=120, max_retries=3, backoff_s=0.5, concurrency=4)
    results = backend.generate([GenerationRequest(messages=[{"role": "user", "content": "..."}],
                                                  n=1, max_new_tokens=512, temperature=0.0)])
    probs = backend.score_labels(prompts, ["A", "B"])   # first-token top_logprobs; see below

Protocol
--------
- URL: ``base_url`` + ``/chat/completions`` when ``base_url`` ends in ``/v1``, else
  ``base_url + /v1/chat/completions`` (so both ``http://host:8000`` and ``https://api.x.com/v1`` work).
- A request with ``prompt=`` (raw text) is sent as one user message; ``messages=`` are sent as is,
  with ``system_prompt`` (when set) prepended as a system turn if the request has none.
- Body: ``model, messages, n, temperature, top_p, <max_tokens_field>, stop`` (omitted when empty),
  ``seed`` (when set), merged with ``extra_body``. Providers that reject ``n > 1`` take
  ``split_n=True``: then ``n`` calls of ``n=1`` are made, each with seed ``derive_seed(seed, j)`` when
  the request has a seed.
- Reply: ``choices[k].message.content`` (``null`` becomes ``""``) and ``finish_reason``
  (``"length"`` stays ``"length"``, anything else is ``"stop"``). Chat APIs return no token ids, so
  :class:`~selectrust.generation.backends.base.Sample` has ``token_ids == logprobs == []``; this backend is for
  judging, mining and evaluation, not for RL rollouts that need sampled log-probs.
- ``score_labels``: one call per prompt with ``max_tokens=1, temperature=0, logprobs=true,
  top_logprobs=20``; a label's log-prob is the best first-token entry whose stripped text equals the
  stripped label (case-sensitive); labels absent from the top list get probability 0; if none is
  present the call fails with :class:`ServerResponseError`. Only single-token labels (A/B) are
  meaningful this way.
- Auth: ``Authorization: Bearer $<api_key_env>`` when ``api_key_env`` names an environment variable
  (the key itself is never stored in configs or logs). A named but unset variable is an error at
  construction time.

Evaluation (``generation=openai_chat``; registered as :data:`BACKEND`: keys :class:`OpenAIChatSettings`, factory
:func:`build`): ``prompt_settings`` holds the ``prompt`` group; ``eval_hooks.evaluate.build_requests`` puts its
system turn and prefix into each row's messages, as for the HF backend, and the server applies its own chat
template.

Bounds and errors (``transport``, shared with the vLLM client): ``timeout_s`` is a **deadline for the
whole request**, attempts and the waits between them included (a server that sends one byte at a time is
cut off when it passes); a reply body over ``max_response_bytes`` (16 MiB) is refused without being read
whole; ``choices`` must carry indexes ``0..n-1`` once each (a reply of one choice for ``n > 1`` suggests
``split_n=true``). :class:`ServerUnreachableError` (refused, reset, timed out; names the URL),
:class:`ServerResponseError` (the server's own message first, then status, URL and request; malformed
JSON; wrong choices), :class:`ServerCapabilityError` (no log-probs). Errors carry ``attempts`` and
``timed_out``. Connection errors, HTTP 429 and 5xx are retried ``max_retries`` times, waiting
``backoff_s * 2**attempt`` or the server's ``Retry-After`` (capped at 60 s), whichever is longer, within the
deadline; validation errors (HTTP 422, or a 4xx/5xx whose body is a validation error) never are.
"""

from __future__ import annotations

import http.client
import logging
import math
import os
import time
from dataclasses import dataclass
from typing import Any, Optional, Sequence

from .base import GenerationBackend, GenerationRequest, GenerationResult, Sample, derive_seed
from ..prompts import PromptSettings
import selectrust.generation.backends.transport as _http
from .spec import BackendSpec, BuildContext, Capabilities, check_positive, setting
from .transport import ServerCapabilityError, ServerError, ServerResponseError, ServerUnreachableError, request_pool

log = logging.getLogger(__name__)

__all__ = ["OpenAIChatBackend", "ServerError", "ServerResponseError", "ServerUnreachableError", "ServerCapabilityError",
           "check_choice_indexes"]

RETRY_AFTER_CAP_S = _http.RETRY_AFTER_CAP_S


def check_choice_indexes(choices: list, n: int, what: str, hint: str = "") -> list:
    """``choices`` ordered by their ``index``, which must be exactly ``0..n-1`` (each once); choices without
    any ``index`` are taken in order. Anything else is a :class:`ServerResponseError`."""
    if len(choices) != n:
        raise ServerResponseError(f"{what}: asked for n={n} choices, got {len(choices)}{hint}")
    idx = [c.get("index") if isinstance(c, dict) else None for c in choices]
    if all(i is None for i in idx):
        return list(choices)
    if sorted(i for i in idx if isinstance(i, int) and not isinstance(i, bool)) != list(range(n)):
        raise ServerResponseError(f"{what}: choice indexes {idx[:20]} do not cover 0..{n - 1} once each; refused")
    return [c for _, c in sorted(zip(idx, choices), key=lambda t: t[0])]


def chat_url(base_url: str) -> str:
    base = base_url.rstrip("/")
    return base + ("/chat/completions" if base.endswith("/v1") else "/v1/chat/completions")


class OpenAIChatBackend(GenerationBackend):
    """Generation backend over an OpenAI-compatible ``/v1/chat/completions`` endpoint."""

    name = "openai_chat"

    def __init__(self, base_url: str, model: str, *, api_key_env: str | None = None, timeout_s: float = 120.0,
                 max_retries: int = 3, backoff_s: float = 0.5, concurrency: int = 4, split_n: bool = False,
                 max_tokens_field: str = "max_tokens", system_prompt: str | None = None,
                 extra_body: dict[str, Any] | None = None, max_response_bytes: int = _http.DEFAULT_MAX_BODY_BYTES,
                 prompt_settings: PromptSettings | None = None):
        if max_retries < 0 or timeout_s <= 0 or backoff_s < 0 or concurrency < 1 or max_response_bytes < 1:
            raise ValueError("OpenAIChatBackend: need max_retries >= 0, timeout_s > 0, backoff_s >= 0, concurrency >= 1, "
                             "max_response_bytes >= 1")
        if not model:
            raise ValueError("OpenAIChatBackend: model name is empty")
        self.url = chat_url(base_url)
        self.model = model
        self.timeout_s, self.max_retries, self.backoff_s = float(timeout_s), int(max_retries), float(backoff_s)
        self.concurrency = int(concurrency)
        self.split_n = bool(split_n)
        self.max_tokens_field = max_tokens_field
        self.system_prompt = system_prompt
        self.extra_body = dict(extra_body or {})
        self.max_response_bytes = int(max_response_bytes)
        # Evaluation (eval_hooks.evaluate.build_requests) puts this system turn and prefix into the request
        # messages, as for the HF backend; the server applies its own chat template.
        self.prompt_settings = prompt_settings or PromptSettings()
        self._headers = {"Content-Type": "application/json"}
        if api_key_env:
            key = os.environ.get(api_key_env)
            if not key:
                raise ValueError(f"OpenAIChatBackend: api_key_env={api_key_env!r} names an environment variable "
                                 "that is not set")
            self._headers["Authorization"] = f"Bearer {key}"

    # -- HTTP ---------------------------------------------------------------------------------
    def post(self, body: dict, what: str) -> dict:
        """POST ``body`` to the chat endpoint, within ``timeout_s`` in all (attempts and waits); the parsed
        JSON reply (a dict with a ``choices`` list)."""
        reply = _http.request("POST", self.url, body, what, attempt_timeout_s=self.timeout_s,
                              deadline=time.monotonic() + self.timeout_s, max_retries=self.max_retries,
                              backoff_s=self.backoff_s, headers=self._headers, max_body_bytes=self.max_response_bytes,
                              client="chat endpoint", unreachable_hint=" Is the server running and the URL right?")
        out = _http.parse_json(reply, self.url, what)
        if not isinstance(out, dict) or not isinstance(out.get("choices"), list):
            raise ServerResponseError(f"{what}: reply from {self.url} has no 'choices' list: {str(out)[:300]}")
        return out

    def check_reachable(self, timeout_s: float = 10.0) -> None:
        """Raise :class:`ServerUnreachableError` unless the server answers ``GET <base>/models`` within
        ``timeout_s`` (any HTTP status counts as an answer: some providers list no models). No generation."""
        url = self.url[: -len("/chat/completions")] + "/models"
        try:
            _http._attempt("GET", url, None, self._headers, timeout_s, self.max_response_bytes)
        except _http.BodyTooLarge:
            pass
        except (OSError, http.client.HTTPException) as e:
            raise ServerUnreachableError(f"chat endpoint at {url} is unreachable ({type(e).__name__}: {e}) for "
                                         "GET models (reachability check). Is the server running and the URL right?",
                                         timed_out=isinstance(e, TimeoutError)) from None

    def identity(self) -> dict:
        """The endpoint, model name and body settings (:meth:`GenerationBackend.identity`)."""
        return {"backend": self.name, "url": self.url, "model": self.model, "system_prompt": self.system_prompt,
                "max_tokens_field": self.max_tokens_field, "split_n": self.split_n, "extra_body": self.extra_body}

    # -- generation -----------------------------------------------------------------------------
    def messages_of(self, req: GenerationRequest) -> list[dict]:
        msgs = [{"role": "user", "content": req.prompt}] if req.messages is None else list(req.messages)
        if self.system_prompt and not any(m.get("role") == "system" for m in msgs):
            msgs = [{"role": "system", "content": self.system_prompt}] + msgs
        return msgs

    def _body(self, req: GenerationRequest, n: int, seed: int | None) -> dict:
        body = {"model": self.model, "messages": self.messages_of(req), "n": n,
                "temperature": float(req.temperature), "top_p": float(req.top_p),
                self.max_tokens_field: int(req.max_new_tokens)}
        if req.stop:
            body["stop"] = list(req.stop)
        if seed is not None:
            body["seed"] = int(seed)
        body.update(self.extra_body)
        return body

    def _calls(self, req: GenerationRequest) -> list[tuple[int, int | None]]:
        """(n, seed) of each call one request needs."""
        if not self.split_n or req.n == 1:
            return [(req.n, req.seed)]
        return [(1, None if req.seed is None else derive_seed(req.seed, j)) for j in range(req.n)]

    def _one(self, i: int, req: GenerationRequest, n: int, seed: int | None) -> list[Sample]:
        first = self.messages_of(req)[-1].get("content", "")
        what = f"POST chat/completions (model={self.model!r}, request {i}, n={n}, last turn {str(first)[:60]!r})"
        out = self.post(self._body(req, n, seed), what)
        hint = ("; this server ignores n: set split_n=true (generation.split_n=true) to send n calls of n=1"
                if n > 1 and len(out["choices"]) == 1 else "")
        choices = check_choice_indexes(out["choices"], n, what, hint)
        samples = []
        for k, ch in enumerate(choices):
            try:
                text = ch["message"].get("content")
            except (KeyError, TypeError, AttributeError) as e:
                raise ServerResponseError(f"{what}: choice {k} has no message ({str(ch)[:200]})") from e
            if text is not None and not isinstance(text, str):
                raise ServerResponseError(f"{what}: choice {k} content is not a string: {str(text)[:200]}")
            samples.append(Sample(text=text or "", token_ids=[], logprobs=[], null_content=text is None,
                                  finish_reason="length" if ch.get("finish_reason") == "length" else "stop"))
        return samples

    def generate(self, requests: Sequence[GenerationRequest], *, progress: bool = False,
                 desc: str = "generate") -> list[GenerationResult]:
        from tqdm.auto import tqdm  # deferred: imports tqdm

        jobs = [(i, n, seed) for i, r in enumerate(requests) for n, seed in self._calls(r)]
        got: dict[int, list[list[Sample]]] = {i: [] for i in range(len(requests))}
        bar = tqdm(total=len(jobs), desc=desc, disable=not progress, unit="call")
        try:
            with request_pool(min(self.concurrency, max(1, len(jobs)))) as pool:
                outs = pool.map(lambda j: self._one(j[0], requests[j[0]], j[1], j[2]), jobs)
                for (i, _, _), samples in zip(jobs, outs):  # map keeps job order: samples stay in j order
                    got[i].append(samples)
                    bar.update(1)
        finally:
            bar.close()
        return [GenerationResult(request=r, samples=[s for part in got[i] for s in part])
                for i, r in enumerate(requests)]

    def score_labels(self, prompts: Sequence[str | list[dict]], labels: Sequence[str]) -> list[dict[str, float]]:
        """Label probabilities from the first generated token's ``top_logprobs`` (see module docstring).

        Labels that differ only after a shared start (``"ANSWER: A"`` / ``"ANSWER: B"``) cannot be told apart by
        the first token: refused with :class:`ServerCapabilityError` before any call."""
        stripped = [lab.strip() for lab in labels]
        shared = os.path.commonprefix(stripped)
        if len(labels) > 1 and (shared or any(len(s.split()) > 1 for s in stripped)):
            raise ServerCapabilityError(
                f"openai_chat at {self.url} cannot score the labels {list(labels)}: a chat endpoint gives log-probs of "
                "the first generated token only (top_logprobs), and these labels are not single first tokens; "
                "turn label probabilities off (eval.med.label_probs=false) or use generation=hf / a vLLM server")
        out = []
        for i, p in enumerate(prompts):
            req = GenerationRequest(messages=p) if isinstance(p, list) else GenerationRequest(prompt=p)
            body = self._body(req, 1, None)
            body.update({self.max_tokens_field: 1, "temperature": 0.0, "logprobs": True, "top_logprobs": 20})
            what = f"POST chat/completions score_labels (model={self.model!r}, prompt {i})"
            reply = self.post(body, what)
            try:
                top = reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
                pairs = [(str(t["token"]).strip(), float(t["logprob"])) for t in top]
            except (KeyError, IndexError, TypeError, ValueError) as e:
                raise ServerCapabilityError(f"{what}: the reply has no logprobs.content[0].top_logprobs "
                                            f"({type(e).__name__}: {e}): this server cannot provide label "
                                            "probabilities (it does not support logprobs/top_logprobs)") from e
            lp = {lab: max((v for t, v in pairs if t == lab.strip()), default=-math.inf) for lab in labels}
            m = max(lp.values())
            if m == -math.inf:
                raise ServerResponseError(f"{what}: none of the labels {list(labels)} is among the top "
                                          f"{len(pairs)} first tokens {[t for t, _ in pairs][:20]}")
            z = sum(math.exp(v - m) for v in lp.values())
            out.append({lab: math.exp(v - m) / z for lab, v in lp.items()})
        return out


# ---- registration (selectrust/generation/backends/__init__.py): generation=openai_chat --------------------------
@dataclass
class OpenAIChatSettings:
    """The keys of ``generation=openai_chat`` (and of a ``mine-forks`` model with ``backend: openai_chat``)."""

    url: str = setting("http://127.0.0.1:8000", "Base URL of the server (with or without /v1).")
    model: Optional[str] = setting(None, "The model name sent in every request (required).")
    api_key_env: Optional[str] = setting(None, "Name of the environment variable that holds the API key (sent as "
                                               "'Authorization: Bearer'); the key itself never goes into a config.")
    concurrency: int = setting(4, "HTTP requests in flight.")
    split_n: bool = setting(False, "Send n calls of n=1 (seeds derived per sample) for servers that ignore n "
                                   "(llama.cpp) or refuse n > 1.")
    max_tokens_field: str = setting("max_tokens", "Name of the length field (max_tokens | max_completion_tokens).")
    timeout_s: float = setting(120.0, "A deadline for the whole request, retries and waits included.")
    max_retries: int = setting(3, "Retries on transient errors (connection, 429, 5xx), with exponential backoff; "
                                  "validation errors are never retried.")
    extra_body: dict[str, Any] = setting({}, "Extra fields merged into every request body.")

    def check(self, group: str) -> None:
        check_positive(self, ("timeout_s", "concurrency"), group)
        if not self.model:
            raise ValueError(f"{group}=openai_chat needs {group}.model: the model name the server serves "
                             "(GET <url>/v1/models lists it)")
        if self.api_key_env and not os.environ.get(self.api_key_env):
            raise ValueError(f"{group}.api_key_env={self.api_key_env!r} names an environment variable that is not set")


def build(settings: OpenAIChatSettings, ctx: BuildContext) -> OpenAIChatBackend:
    """The client of the chat endpoint, rendering evaluation prompts under ``ctx.prompt_settings``; it evaluates
    the model the server serves (``settings.model``), not the run's."""
    return OpenAIChatBackend(settings.url, settings.model, api_key_env=settings.api_key_env or None,
                             timeout_s=settings.timeout_s, max_retries=settings.max_retries,
                             concurrency=settings.concurrency, split_n=settings.split_n,
                             max_tokens_field=settings.max_tokens_field, extra_body=settings.extra_body,
                             prompt_settings=ctx.prompt_settings)


BACKEND = BackendSpec(
    name="openai_chat", settings=OpenAIChatSettings, factory=build, errors=(ServerError,),
    capabilities=Capabilities(policy_model=False, standalone=True),
    summary="evaluate a model behind any OpenAI-compatible /v1/chat/completions endpoint; evaluation and mining "
            "only")
