"""HTTP client backend for a vLLM OpenAI-compatible server (``generation=vllm_server``).

The same client talks to the loopback reference server (``reference_server.py``) in CPU tests.
Only the Python standard library is used for HTTP, so no dependency is added.

API
---
    backend = VLLMServerBackend("http://127.0.0.1:8000", "Qwen/Qwen2.5-0.5B-Instruct", tokenizer,
                                timeout_s=300, max_retries=3, backoff_s=0.5)
    results = backend.generate([GenerationRequest(messages=..., n=8, max_new_tokens=256,
                                                  temperature=1.0, top_p=1.0, stop=[], seed=None)])
    backend.load_adapter("/run/adapters/adapter-s10", version="s10")   # later requests use it
    lp = backend.prompt_logprobs(token_ids)     # log p(x_t | x_<t), t = 1..L-1, current adapter
    probs = backend.score_labels(prompts, ["yes", "no"])

Protocol (vLLM ``/v1/completions``; the reference server implements the same subset; the request bodies and the
parsing of replies, with sampled ids, log-probs and vLLM's ``prompt_logprobs``, are ``completions_wire.py``):

- Requests that share sampling settings, seed and adapter are sent together (``prompt`` is a list, ``n``
  samples each). The API takes one ``seed`` per call, so requests with seeds of their own (GRPO rollouts: one
  per prompt, which makes the samples independent of the batch and of the rank layout) go one call per prompt;
  calls run concurrently with at most ``concurrency * max_prompts_per_call`` prompts in flight, so the server
  still batches as many prompts as with shared-seed calls.
- With a tokenizer, prompts are rendered and tokenized *client side* by the one renderer
  (:func:`selectrust.generation.prompts.render_prompt`, with the ``prompt`` group's template switch and
  ``chat_template_kwargs``) and sent as token ids, so the server sees exactly the ids the trainer
  trains on (sending text would let the server re-tokenize and add a BOS). Without a tokenizer, only
  raw ``prompt=`` requests work; their text is sent with ``add_special_tokens=false``.
- vLLM must run with ``--logprobs-mode raw_logprobs`` (the launcher passes it), so the sampled tokens'
  log-probs are temperature-1 log-probs, as :class:`~selectrust.generation.backends.base.Sample` documents; ``top_k=-1,
  min_p=0, repetition_penalty=1`` are always sent, so a model's ``generation_config.json`` cannot silently change
  the sampling distribution.
- Adapters (``vllm_adapters.py``: the protocol and how versions are named, the check below):
  each version is loaded under a new name, requests name it in ``model``, older ones are unloaded.
  ``use_adapter(path, version)`` routes a non-main rank to an adapter the main rank loaded.

Servers that are not vLLM are declared flavours of this backend (:data:`FLAVOURS`, registered with their own
capabilities; ``server_kind``: ``auto`` reads ``owned_by`` from ``GET /v1/models`` once, before the first
generation; ``vllm`` | ``llama_cpp`` | ``openai`` set it). ``llama_cpp`` and ``openai`` are plain OpenAI-style
``/v1/completions`` servers (:data:`TEXT_COMPLETIONS`): requests are rendered client side to *text* (the same
renderer), sent one prompt and one sample per call (such servers may refuse token ids and prompt lists and drop
``n``; sample ``j`` of a seeded request gets ``derive_seed(seed, j)``), with the sampling fields in that server's
terms (:data:`SAMPLING_FIELDS`: llama.cpp's ``repeat_penalty=1``, ``top_k=0``, ``min_p=0``; nothing extra for an
unknown server) and no vLLM-only field. Samples then carry text only. Adapters, prompt log-probs (the
stale-weight probe, label probabilities) and so RL rollouts raise :class:`ServerCapabilityError` (one line) on
such a server (:meth:`VLLMServerBackend.require` asks the flavour's capabilities); with a declared
``server_kind`` the config checks refuse them before anything runs. :meth:`health` falls back to
``/v1/models`` for servers without ``/health``.

Errors: :class:`ServerUnreachableError` (names the URL, and the server's last error answer when it gave one before
going silent), :class:`ServerResponseError` (the server's own message first; malformed JSON, wrong number of
samples, 4xx, validation errors), :class:`AdapterLoadError` (never a silent fallback to the base model),
:class:`ServerCapabilityError`. Connection resets/refusals and 5xx other than validation errors are retried
``max_retries`` times with exponential backoff; reply bodies are bounded (``max_response_bytes``).
``error_context`` (e.g. the launcher's :meth:`~launch.vllm_launcher.VLLMServer.describe`: the engine's own error
line and the log's last lines) is appended to every error so a dead server's last words reach the user.

Time: each attempt of a call is bounded as a whole (not each socket read) by ``timeout_s`` plus
``timeout_per_token_s`` for every token the call asks the server to process: its prompt tokens and ``prompts x n x
max_tokens`` new ones, times the calls in flight beside it (they share the server). A call of several prompts that
runs out of time is split in two halves, each sized and sent again (down to one prompt, which is retried as a
whole), never resubmitted whole: on a slow CPU server a 64-prompt call that timed out would time out again.

Adapters: with ``server_settings`` (what ``launch/vllm_launcher.py`` writes beside its log) an adapter the server
cannot serve whole is refused before it is loaded (:func:`~selectrust.generation.backends.vllm_adapters.check_adapter_fits`).
"""

from __future__ import annotations

import json
import logging
import secrets
from collections import defaultdict
from dataclasses import dataclass
from typing import Callable, Optional, Sequence

from ..prompts import PromptSettings, render_prompt_text, request_prompt_ids
import selectrust.generation.backends.transport as _http
from .transport import ServerCapabilityError, ServerError, ServerResponseError, ServerUnreachableError, request_pool
from .adapter_checksum import checksum_or_none
from .base import GenerationBackend, GenerationRequest, GenerationResult, Sample, label_probabilities, label_sequences
from .completions_wire import (parse_prompt_logprobs, parse_text_choice, parse_token_choices, prompt_logprobs_body,
                               text_completion_body, token_completion_body)
from .spec import BackendSpec, BuildContext, Capabilities, check_positive, setting
from .vllm_adapters import AdapterLoadError, check_adapter_fits, read_server_settings
from selectrust.core.io import root_error_line, tail_file

log = logging.getLogger(__name__)

#: ``owned_by`` values of ``/v1/models`` entries -> server kind (``server_kind=auto``). The reference server
#: implements vLLM's extensions, so it counts as vLLM.
OWNED_BY_KIND = {"vllm": "vllm", "reference": "vllm", "llamacpp": "llama_cpp", "llama.cpp": "llama_cpp",
                 "llama_cpp": "llama_cpp", "me": "llama_cpp"}  # llama-cpp-python's server reports "me"
#: A vLLM server (or the reference server): token-id prompts, sampled token ids and log-probs, prompt log-probs,
#: runtime LoRA loading, so the trainer's adapter can be synced to it and probed.
TOKEN_EXACT = Capabilities(loads_adapters=True, prompt_logprobs=True, label_scores=True, sampled_token_ids=True,
                           weight_sync=True)
#: A plain OpenAI-style ``/v1/completions`` server (llama.cpp's, or unknown): text in, text out, nothing else.
TEXT_COMPLETIONS = Capabilities()
#: The server kinds this backend speaks (``server_kind``), each with what it can do.
FLAVOURS = {"vllm": TOKEN_EXACT, "llama_cpp": TEXT_COMPLETIONS, "openai": TEXT_COMPLETIONS}
SERVER_KINDS = ("auto", *FLAVOURS)
#: Sampling fields sent in each server's own terms, so that no server default changes the distribution.
SAMPLING_FIELDS = {"vllm": {"top_k": -1, "min_p": 0.0, "repetition_penalty": 1.0},
                   "llama_cpp": {"top_k": 0, "min_p": 0.0, "repeat_penalty": 1.0},
                   "openai": {}}


class VLLMServerBackend(GenerationBackend):
    """Generation backend over a vLLM (or reference) server's OpenAI-compatible HTTP API.

    ``model_name`` is the served base model name (vLLM ``--served-model-name``, default the model
    path). ``tokenizer`` is the trainer's tokenizer (needed for chat messages, label scoring and token
    id prompts). ``error_context`` returns extra text (server log tail) appended to errors.
    """

    name = "vllm_server"

    def __init__(self, base_url: str, model_name: str, tokenizer=None, *, timeout_s: float = 300.0,
                 max_retries: int = 3, backoff_s: float = 0.5, prompt_settings: PromptSettings | None = None,
                 max_prompts_per_call: int = 64, concurrency: int = 4, adapter_prefix: str = "policy",
                 error_context: Callable[[], str] | None = None, server_kind: str = "auto",
                 max_response_bytes: int = _http.DEFAULT_MAX_BODY_BYTES, timeout_per_token_s: float = 0.02,
                 server_settings: dict | None = None):
        if max_retries < 0 or timeout_s <= 0 or backoff_s < 0 or timeout_per_token_s < 0:
            raise ValueError("VLLMServerBackend: need max_retries >= 0, timeout_s > 0, backoff_s >= 0, "
                             "timeout_per_token_s >= 0")
        if server_kind not in SERVER_KINDS:
            raise ValueError(f"VLLMServerBackend: server_kind must be one of {SERVER_KINDS}, got {server_kind!r}")
        self.server_kind = server_kind
        self._kind: str | None = None if server_kind == "auto" else server_kind
        self.max_response_bytes = int(max_response_bytes)
        self.base_url = base_url.rstrip("/")
        self.model_name = model_name
        self.tokenizer = tokenizer
        self.timeout_s = float(timeout_s)
        self.timeout_per_token_s = float(timeout_per_token_s)
        self.server_settings = dict(server_settings or {})
        self.max_retries = int(max_retries)
        self.backoff_s = float(backoff_s)
        self.prompt_settings = prompt_settings or PromptSettings()
        self.max_prompts_per_call = int(max_prompts_per_call)
        self.concurrency = max(1, int(concurrency))
        self.adapter_prefix = adapter_prefix
        self.error_context = error_context
        self._nonce = secrets.token_hex(3)
        self._adapters: list[str] = []  # loaded by this client, oldest first; last = current
        self.current_version: str | None = None

    # -- HTTP ---------------------------------------------------------------------------------
    def _context(self) -> str:
        if self.error_context is None:
            return ""
        try:
            extra = self.error_context()
        except Exception as e:  # the context hook must never hide the real error
            extra = f"(could not read server log: {e})"
        return f"\n--- server log (last lines) ---\n{extra}" if extra else ""

    def _request(self, method: str, path: str, payload: dict | None, what: str, *,
                 timeout_s: float | None = None, parse_json: bool = True, retries: int | None = None,
                 retry_timeouts: bool = True):
        """One HTTP call with bounded retries (``_http.request``: each attempt within ``timeout_s``, bounded
        reply size, the server's message first). Returns parsed JSON (or the text if not parse_json)."""
        url = f"{self.base_url}{path}"
        reply = _http.request(method, url, payload, what, attempt_timeout_s=timeout_s or self.timeout_s,
                              max_retries=self.max_retries if retries is None else retries, backoff_s=self.backoff_s,
                              max_body_bytes=self.max_response_bytes, retry_429=False, client="vLLM server",
                              unreachable_hint=" Is it running (launch/vllm_server.sh) and is the URL right?",
                              context=self._context, retry_timeouts=retry_timeouts)
        if not parse_json:
            return reply.body.decode("utf-8", "replace")
        return _http.parse_json(reply, url, what, self._context)

    def call_timeout_s(self, tokens: int, in_flight: int = 1) -> float:
        """Time limit of one attempt of a call that asks the server to process ``tokens`` tokens (prompt and new),
        with ``in_flight`` calls (this one included) sharing the server (module docstring)."""
        return self.timeout_s + self.timeout_per_token_s * tokens * max(1, in_flight)

    def _split_on_timeout(self, items: list, call: Callable[[list, bool], list], what: str) -> list:
        """``call(items, last_try)`` for a call of several items (prompts): if an attempt runs out of time, the two
        halves are sent instead (each split again if needed); one item is retried as a whole (``last_try``)."""
        single = len(items) == 1
        try:
            return call(items, single)
        except ServerUnreachableError as e:
            if single or not e.timed_out:
                raise
        half = len(items) // 2
        log.warning("vllm_server: %s ran out of time with %d prompts; sending it as two calls of %d and %d",
                    what, len(items), half, len(items) - half)
        return self._split_on_timeout(items[:half], call, what) + self._split_on_timeout(items[half:], call, what)

    def health(self, timeout_s: float = 5.0) -> bool:
        """True if ``GET /health`` answers 200, or, for servers without ``/health`` (llama.cpp's Python
        server), ``GET /v1/models`` does (one attempt each, no retries)."""
        for path in ("/health", "/v1/models"):
            try:
                self._request("GET", path, None, f"GET {path}", timeout_s=timeout_s, parse_json=False, retries=0)
                return True
            except ServerUnreachableError:
                return False
            except ServerError:
                continue
        return False

    def models(self) -> list[dict]:
        """The entries of ``GET /v1/models``."""
        out = self._request("GET", "/v1/models", None, "GET /v1/models")
        if not isinstance(out, dict) or not isinstance(out.get("data"), list):
            raise ServerResponseError(f"GET {self.base_url}/v1/models: unexpected body {str(out)[:200]}")
        return [m for m in out["data"] if isinstance(m, dict)]

    @property
    def kind(self) -> str:
        """``vllm`` | ``llama_cpp`` | ``openai``: ``server_kind``, or (``auto``) detected once from the
        ``owned_by`` of ``/v1/models`` (:data:`OWNED_BY_KIND`; anything else is a plain OpenAI-compatible server)."""
        if self._kind is None:
            owners = {str(m.get("owned_by", "")).lower() for m in self.models()}
            kinds = {OWNED_BY_KIND[o] for o in owners if o in OWNED_BY_KIND}
            self._kind = "vllm" if "vllm" in kinds else (kinds.pop() if len(kinds) == 1 else "openai")
            if self._kind != "vllm":
                log.warning("vllm_server: %s is not a vLLM server (/v1/models owned_by %s): text prompts, one prompt "
                            "and one sample per call, standard sampling fields%s", self.base_url, sorted(owners),
                            "" if self._kind == "llama_cpp" else "; server-side sampling defaults (top_k, repetition "
                            "penalty) may apply")
        return self._kind

    @property
    def capabilities(self) -> Capabilities:
        """What this server can do: its flavour's capabilities (:data:`FLAVOURS`, by :attr:`kind`)."""
        return FLAVOURS[self.kind]

    def require(self, capability: str, what: str) -> None:
        """Raise :class:`ServerCapabilityError` (one line) unless the server's flavour has ``capability`` (only
        vLLM, or the reference server, has vLLM's token-exact features)."""
        if not getattr(self.capabilities, capability):
            raise ServerCapabilityError(
                f"{what} needs vLLM's token-exact features (token-id prompts, prompt_logprobs, sampled token ids, "
                f"runtime LoRA loading), and the server at {self.base_url} is not vLLM (server kind {self.kind!r}, "
                "from /v1/models or generation.server_kind); evaluate without an adapter, or use generation=openai_chat")

    def list_models(self) -> list[str]:
        try:
            return [m["id"] for m in self.models()]
        except KeyError as e:
            raise ServerResponseError(f"GET {self.base_url}/v1/models: an entry has no id") from e

    # -- prompts --------------------------------------------------------------------------------
    def prompt_ids(self, prompt: str | None = None, messages: list[dict] | None = None) -> list[int]:
        """Token ids a request is generated from: rendered client side by the trainer's renderer
        (``selectrust.generation.prompts.request_prompt_ids``, with ``prompt_settings.chat_template_kwargs``), so the
        server completes exactly the ids training used."""
        if self.tokenizer is None:
            raise ValueError("VLLMServerBackend: chat messages need a tokenizer (pass tokenizer=) so the "
                             "chat template is applied client side, as in training")
        return request_prompt_ids(self.tokenizer, self.prompt_settings, prompt=prompt, messages=messages)

    def _encode(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def _prompt_payload(self, r: GenerationRequest):
        """What goes into the ``prompt`` field: token ids when we have a tokenizer, else a raw prompt's text."""
        if self.tokenizer is None and r.messages is None:
            return r.prompt
        return self.prompt_ids(r.prompt, r.messages)

    def _model_for(self, adapter: str | None) -> str:
        if adapter is not None:
            return adapter
        return self._adapters[-1] if self._adapters else self.model_name

    @property
    def current_adapter(self) -> str | None:
        """Served name of the adapter that requests without ``adapter=`` go to (None = base)."""
        return self._adapters[-1] if self._adapters else None

    def identity(self) -> dict:
        """The server, served model, current adapter (its name holds its checksum) and the client-side tokenizer
        (:meth:`GenerationBackend.identity`)."""
        return {"backend": self.name, "url": self.base_url, "model": self.model_name, "server_kind": self.server_kind,
                "adapter": self.current_adapter, "tokenizer": getattr(self.tokenizer, "name_or_path", None)}

    # -- generation -----------------------------------------------------------------------------
    def generate(self, requests: Sequence[GenerationRequest], *, progress: bool = False,
                 desc: str = "generate") -> list[GenerationResult]:
        from tqdm.auto import tqdm  # deferred: imports tqdm

        if not self.capabilities.sampled_token_ids:
            return self._generate_text(requests, progress=progress, desc=desc)
        payloads = [self._prompt_payload(r) for r in requests]
        groups: dict[tuple, list[int]] = defaultdict(list)
        for i, r in enumerate(requests):
            key = (self._model_for(r.adapter), r.n, r.max_new_tokens, float(r.temperature), float(r.top_p),
                   tuple(r.stop), r.seed)
            groups[key].append(i)
        calls = [(key, idx[s:s + self.max_prompts_per_call]) for key, idx in groups.items()
                 for s in range(0, len(idx), self.max_prompts_per_call)]
        results: dict[int, GenerationResult] = {}
        bar = tqdm(total=len(requests), desc=desc, disable=not progress, unit="prompt")

        largest = max((len(idx) for _, idx in calls), default=1)
        workers = min(len(calls) or 1, self.concurrency * max(1, self.max_prompts_per_call // largest))

        def run(call):
            key, idx = call
            jobs = [(payloads[i], requests[i]) for i in idx]
            out = self._split_on_timeout(jobs, lambda part, last: self._complete(key, part, in_flight=workers,
                                                                                 last_try=last), f"a call of {key[0]!r}")
            return idx, out

        try:
            with request_pool(workers) as pool:
                for idx, out in pool.map(run, calls):
                    for i, res in zip(idx, out):
                        results[i] = res
                    bar.update(len(idx))
        finally:
            bar.close()
        return [results[i] for i in range(len(requests))]

    def _prompt_text(self, r: GenerationRequest) -> str:
        """Text mode: the request rendered client side by the one renderer (the server tokenizes it)."""
        if r.messages is None:
            return r.prompt
        if self.tokenizer is None:
            raise ValueError("VLLMServerBackend: chat messages need a tokenizer (pass tokenizer=) so the "
                             "chat template is applied client side, as in training")
        return render_prompt_text(self.tokenizer, r.messages, self.prompt_settings.transport())

    def _generate_text(self, requests: Sequence[GenerationRequest], *, progress: bool,
                       desc: str) -> list[GenerationResult]:
        """A server that is not vLLM (:attr:`kind`): text prompts, one prompt and one sample per call (such
        servers may refuse token ids and prompt lists and drop ``n``); sample ``j`` of a seeded request
        gets seed ``derive_seed(seed, j)``. Samples carry text only (no token ids or log-probs)."""
        from tqdm.auto import tqdm  # deferred: imports tqdm

        if any(r.adapter is not None for r in requests) or self._adapters:
            self.require("loads_adapters", "generation with a LoRA adapter")
        jobs = [(i, j) for i, r in enumerate(requests) for j in range(r.n)]
        texts = [self._prompt_text(r) for r in requests]
        fields = SAMPLING_FIELDS[self.kind]

        def one(job) -> Sample:
            i, j = job
            r = requests[i]
            what = (f"POST /v1/completions (model={self.model_name!r}, text prompt {i}, sample {j} of n={r.n}, "
                    f"prompt {texts[i][:60]!r})")
            out = self._request("POST", "/v1/completions",
                                text_completion_body(self.model_name, texts[i], r, j, sampling=fields), what)
            return parse_text_choice(out, what, self._context)

        bar = tqdm(total=len(jobs), desc=desc, disable=not progress, unit="call")
        got: dict[int, list[Sample]] = {i: [] for i in range(len(requests))}
        try:
            with request_pool(min(self.concurrency, max(1, len(jobs)))) as pool:
                for (i, _), sample in zip(jobs, pool.map(one, jobs)):  # map keeps the job order: j order per i
                    got[i].append(sample)
                    bar.update(1)
        finally:
            bar.close()
        pids = [request_prompt_ids(self.tokenizer, self.prompt_settings, prompt=r.prompt, messages=r.messages)
                if self.tokenizer is not None else [] for r in requests]
        return [GenerationResult(request=r, samples=got[i], prompt_token_ids=pids[i]) for i, r in enumerate(requests)]

    def _complete(self, key: tuple, jobs: list, *, in_flight: int = 1, last_try: bool = True) -> list[GenerationResult]:
        """One ``/v1/completions`` call for ``jobs`` (``(prompt payload, request)`` pairs sharing ``key``)."""
        prompts, reqs = [p for p, _ in jobs], [r for _, r in jobs]
        model, n, max_tokens, temperature, top_p, stop, seed = key
        body = token_completion_body(model, prompts, n, max_tokens, temperature, top_p, stop, seed,
                                     sampling=SAMPLING_FIELDS["vllm"])
        first = reqs[0].prompt if reqs[0].prompt is not None else json.dumps(reqs[0].messages)
        what = (f"POST /v1/completions (model={model!r}, {len(prompts)} prompt(s) x n={n}, "
                f"max_tokens={max_tokens}, first prompt {first[:60]!r})")
        tokens = sum(len(p) if isinstance(p, list) else len(p) // 4 for p in prompts) + len(prompts) * n * max_tokens
        out = self._request("POST", "/v1/completions", body, what, timeout_s=self.call_timeout_s(tokens, in_flight),
                            retry_timeouts=last_try)
        samples = parse_token_choices(out, len(prompts), n, what, self._context)
        return [GenerationResult(request=req, samples=got, prompt_token_ids=prompt if isinstance(prompt, list) else [])
                for prompt, req, got in zip(prompts, reqs, samples)]

    # -- prompt log-probs: sync probe and label scoring ----------------------------------------
    def prompt_logprobs(self, prompt: str | list[int], adapter: str | None = None) -> list[float]:
        """``[log p(x_t | x_<t) for t in 1..L-1]`` of a token id list (or text, tokenized client side
        when a tokenizer is set) under ``adapter`` (default: the current adapter; pass
        ``backend.model_name`` for the base model)."""
        return self.prompt_logprobs_batch([prompt], adapter=adapter)[0]

    def prompt_logprobs_batch(self, prompts: Sequence[str | list[int]], adapter: str | None = None) -> list[list[float]]:
        if self._kind is not None:
            self.require("prompt_logprobs", "prompt log-probs (the stale-weight probe, label probabilities)")
        try:
            return self._prompt_logprobs_batch(prompts, adapter)
        except ServerResponseError as e:
            if self._kind is None:  # a failure is where a non-vLLM server shows: say what it lacks
                try:
                    self.require("prompt_logprobs", "prompt log-probs (the stale-weight probe, label probabilities)")
                except ServerUnreachableError:  # it answered, then died: its own answer is the error to show
                    raise e from None
            raise

    def _prompt_logprobs_batch(self, prompts: Sequence[str | list[int]], adapter: str | None) -> list[list[float]]:
        sent = [self._prompt_payload(p) if isinstance(p, str) else list(p) for p in prompts]
        if not isinstance(sent[0], list):
            raise ValueError("prompt_logprobs of text needs a tokenizer; pass token ids instead")
        model = self._model_for(adapter)
        out_all: list[list[float]] = []
        for s in range(0, len(sent), self.max_prompts_per_call):
            out_all += self._split_on_timeout(sent[s:s + self.max_prompts_per_call],
                                              lambda part, last: self._prompt_logprobs_call(model, part, last),
                                              f"a prompt log-probs call of {model!r}")
        return out_all

    def _prompt_logprobs_call(self, model: str, chunk: list[list[int]], last_try: bool) -> list[list[float]]:
        what = f"POST /v1/completions prompt_logprobs (model={model!r}, {len(chunk)} sequence(s))"
        out = self._request("POST", "/v1/completions", prompt_logprobs_body(model, chunk), what,
                            timeout_s=self.call_timeout_s(sum(len(c) + 1 for c in chunk)), retry_timeouts=last_try)
        return parse_prompt_logprobs(out, chunk, what, self._context)

    def score_labels(self, prompts: Sequence[str | list[dict]], labels: Sequence[str]) -> list[dict[str, float]]:
        """Same definition as :meth:`HFBackend.score_labels`, from server prompt log-probs of
        ``prompt_ids + label_ids`` (summed over the label tokens, soft-maxed across labels)."""
        if self.tokenizer is None:
            raise ValueError("VLLMServerBackend.score_labels needs a tokenizer (label token boundaries)")
        seqs, _, label_lens = label_sequences(self, prompts, labels)
        lps = self.prompt_logprobs_batch(seqs)
        return label_probabilities([sum(lp[len(lp) - k:]) for lp, k in zip(lps, label_lens)], labels)

    # -- adapters -------------------------------------------------------------------------------
    def adapter_name(self, version: str, checksum: str | None = None) -> str:
        """Served name of an adapter version. With the weights' checksum the name is the same on every
        rank (and changes whenever the weights do); without, a per-client nonce keeps it unique."""
        if checksum:
            return f"{self.adapter_prefix}-{version}-{checksum[:12]}"
        return f"{self.adapter_prefix}-{self._nonce}-{version}"

    def check_adapter_fits(self, path: str) -> None:
        """Raise :class:`AdapterLoadError` if ``server_settings`` say the server cannot serve the adapter at ``path``
        whole (:func:`selectrust.generation.backends.vllm_adapters.check_adapter_fits`)."""
        check_adapter_fits(path, self.server_settings, self.base_url)

    def use_adapter(self, path: str, version: str) -> None:
        """Route later requests to an adapter another process already loaded (non-main ranks).
        Raises :class:`AdapterLoadError` if the server does not list it."""
        name = self.adapter_name(str(version), checksum_or_none(path))
        if name not in self.list_models():
            raise AdapterLoadError(f"adapter {name!r} (version {version!r}, {path}) is not loaded on "
                                   f"{self.base_url}; did the main process's sync fail?{self._context()}")
        self._adapters, self.current_version = [name], str(version)
        self._kind = self._kind or "vllm"

    def load_adapter(self, path: str, version: str) -> None:
        """Load the adapter at ``path`` under a new name, route later requests to it, unload older
        versions loaded by this client. Raises :class:`AdapterLoadError` if the server refuses;
        requests keep going to the previous adapter only if the caller catches that and continues."""
        if self._kind is not None:
            self.require("loads_adapters", f"loading the LoRA adapter {path}")
        self.check_adapter_fits(path)
        name = self.adapter_name(str(version), checksum_or_none(path))
        if name in self._adapters:  # the same version saved again: never reuse the old copy
            self._request("POST", "/v1/unload_lora_adapter", {"lora_name": name},
                          f"POST /v1/unload_lora_adapter (lora_name={name!r})", parse_json=False)
            self._adapters.remove(name)
        what = f"POST /v1/load_lora_adapter (lora_name={name!r}, lora_path={path!r})"
        try:
            self._request("POST", "/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)}, what,
                          parse_json=False)
        except ServerResponseError as e:
            if self._kind is None and e.status in (404, 405):  # no such route: is this a vLLM server at all?
                self.require("loads_adapters", f"loading the LoRA adapter {path}")
            # Names are unique (checksum or nonce), so "already loaded" means an earlier attempt of this
            # very call succeeded before its reply was lost, or another rank loaded the same weights.
            if "already" not in str(e) or "load" not in str(e):
                raise AdapterLoadError(
                    f"server at {self.base_url} failed to load adapter version {version!r} from "
                    f"{path}: {e}. Refusing to continue with the previous or base weights.") from e
        if name not in self.list_models():
            raise AdapterLoadError(f"server at {self.base_url} acknowledged loading {name!r} but does not list it "
                                   f"in /v1/models{self._context()}")
        old, self._adapters = self._adapters, [name]
        self.current_version = str(version)
        self._kind = self._kind or "vllm"  # it loaded and lists a runtime LoRA adapter: vLLM's API
        for stale in old:
            try:
                self._request("POST", "/v1/unload_lora_adapter", {"lora_name": stale},
                              f"POST /v1/unload_lora_adapter (lora_name={stale!r})", parse_json=False)
            except ServerError as e:  # a leaked old adapter costs memory, not correctness
                log.warning("vllm_server: could not unload old adapter %s: %s", stale, e)

    def close(self) -> None:
        pass

# ---- registration (selectrust/generation/backends/__init__.py): generation=vllm_server --------------------------
@dataclass
class VLLMServerSettings:
    """The keys of ``generation=vllm_server``."""

    url: str = setting("http://127.0.0.1:8000", "Base URL of the server.")
    served_model_name: Optional[str] = setting(None, "The base model name the server serves (None = model.path).")
    concurrency: int = setting(4, "HTTP requests in flight.")
    server_kind: str = setting("auto", "auto (from GET /v1/models: owned_by 'vllm' is vLLM) | vllm | llama_cpp | "
                                       "openai. Not vLLM: text prompts, one prompt and one sample per call, sampling "
                                       "fields in the server's own terms; RL rollouts, the stale-weight probe, "
                                       "adapters and label probabilities are refused.", choices=SERVER_KINDS)
    timeout_s: float = setting(120.0, "Time limit of each attempt of a request, plus timeout_per_token_s for every "
                                      "token the call asks for.")
    timeout_per_token_s: float = setting(0.02, "Extra time per token a call asks the server to process (its prompt "
                                               "tokens and prompts x n x max_tokens new ones, times the calls in "
                                               "flight); a call of several prompts that runs out of time is split in "
                                               "two halves, not resubmitted whole. 0.02 s covers the slowest rate "
                                               "measured on a loaded 2-core CPU server with an adapter.")
    max_retries: int = setting(3, "Retries on transient errors (connection, 5xx), with exponential backoff; "
                                  "validation errors are never retried.")
    sync_every: int = setting(1, "Push the LoRA adapter to the server every this many optimizer steps.")
    probe_threshold: Optional[float] = setting(None, "Max mean |Δlogp| between server and trainer on the probe "
                                                     "sequence. None: by the server's precision, measured at the "
                                                     "first sync (0.05 for a float32 server, 0.3 for a 16-bit one; "
                                                     "trainer/eval_bridge/weight_sync.py). A server that did not follow "
                                                     "the trainer's move since the last sync is stale at any threshold.")
    adapter_dir: Optional[str] = setting(None, "Shared directory for synced adapters (None = <run_dir>/adapters).")
    server_log: Optional[str] = setting(None, "Log file of an externally started server (launch/vllm_launcher.py "
                                              "--log-path); its last lines are appended to every server error, "
                                              "e.g. when it dies. The launcher's settings file beside it (max LoRA "
                                              "rank, LoRA target modules) lets an adapter the server cannot serve "
                                              "whole be refused before it is loaded.")

    def check(self, group: str) -> None:
        check_positive(self, ("sync_every", "timeout_s", "concurrency"), group)
        if self.timeout_per_token_s < 0:
            raise ValueError(f"{group}.timeout_per_token_s must be >= 0, got {self.timeout_per_token_s}")
        if self.probe_threshold is not None:
            check_positive(self, ("probe_threshold",), group)


def server_log_context(path: str | None) -> Callable[[], str] | None:
    """``error_context`` for the client: the engine's own error line (:func:`selectrust.core.io.root_error_line`) and the
    last lines of ``path`` (an external server's log file), so a dead server's last words are part of the error.
    None when not set."""
    if not path:
        return None

    def context() -> str:
        tail = tail_file(path, 40)
        if not tail:
            return f"[{path}: missing or empty]"
        err = root_error_line(tail_file(path, 400))
        return f"[{path}]\n" + (f"server error: {err}\n" if err else "") + tail

    return context


def build(settings: VLLMServerSettings, ctx: BuildContext) -> VLLMServerBackend:
    """The client of the server at ``settings.url``, serving ``served_model_name`` (default: the run's model),
    rendering prompts with the run's tokenizer."""
    return VLLMServerBackend(settings.url, settings.served_model_name or ctx.model_path, tokenizer=ctx.tokenizer,
                             timeout_s=settings.timeout_s, max_retries=settings.max_retries,
                             prompt_settings=ctx.prompt_settings, adapter_prefix=ctx.adapter_prefix,
                             error_context=server_log_context(settings.server_log),
                             concurrency=settings.concurrency, server_kind=settings.server_kind,
                             timeout_per_token_s=settings.timeout_per_token_s,
                             server_settings=read_server_settings(settings.server_log))


BACKEND = BackendSpec(
    name="vllm_server", settings=VLLMServerSettings, factory=build, capabilities=TOKEN_EXACT,
    flavours=FLAVOURS, flavour_key="server_kind", errors=(ServerError,),
    summary="HTTP client of a vLLM server's /v1/completions; server_kind: also llama.cpp's or another "
            "completions server, text only")
