"""The ``/v1/completions`` wire format the server client (``vllm_server.py``) speaks: request bodies, and replies
parsed into samples and log-probs. Pure functions of JSON, no I/O: the client groups, sends, retries and splits.

vLLM (and the reference server, ``reference_server.py``, which implements the same subset):

- A call of ``P`` prompts (token-id lists, or text) with ``n`` samples each returns ``P * n`` ``choices``, each with
  ``index = prompt_idx * n + sample_idx`` (:func:`token_completion_body`, :func:`parse_token_choices`).
- ``logprobs=1`` + ``return_tokens_as_token_ids`` gives the sampled ids (``"token_id:<id>"``) and their log-probs.
  vLLM must run with ``--logprobs-mode raw_logprobs`` (the launcher passes it) so those are temperature-1
  log-probs, as :class:`~selectrust.generation.backends.base.Sample` documents.
- ``top_k=-1, min_p=0, repetition_penalty=1`` are always sent to vLLM (``sampling``: the client's
  ``SAMPLING_FIELDS``, declared with each server kind), so a model's ``generation_config.json`` cannot silently
  change the sampling distribution.
- Prompt log-probs (probe, label scoring) use vLLM's ``prompt_logprobs`` extension: ``choices[k].
  prompt_logprobs`` is ``[None, {"<id>": {"logprob": ...}, ...}, ...]``, one entry per prompt token
  (:func:`prompt_logprobs_body`, :func:`parse_prompt_logprobs`).

A plain OpenAI-style server (llama.cpp's, or unknown): one text prompt and one sample per call, the sampling fields
in that server's own terms (``sampling``) and no vLLM-only field; the one choice carries text only
(:func:`text_completion_body`, :func:`parse_text_choice`).

Every parser raises :class:`~selectrust.generation.backends.transport.ServerResponseError` naming ``what`` (the call) and
ending with ``context()`` (the client's server-log tail; called only when an error is raised).
"""

from __future__ import annotations

from typing import Callable, Sequence

from .base import GenerationRequest, Sample, derive_seed
from .transport import ServerResponseError


def parse_token_id(tok, where: str) -> int:
    """A sampled token's id from an int or vLLM's ``"token_id:<id>"`` (``return_tokens_as_token_ids``); raises
    ``ValueError`` naming ``where`` for anything else."""
    if isinstance(tok, int):
        return tok
    if isinstance(tok, str) and tok.startswith("token_id:"):
        return int(tok.split(":", 1)[1])
    raise ValueError(f"{where}: expected 'token_id:<int>' (return_tokens_as_token_ids), got {tok!r}")


def _finish_reason(choice: dict) -> str:
    return "length" if choice.get("finish_reason") == "length" else "stop"


def token_completion_body(model: str, prompts: list, n: int, max_tokens: int, temperature: float, top_p: float,
                          stop: Sequence[str], seed: int | None, *, sampling: dict) -> dict:
    """The body of one vLLM call: ``prompts`` (token-id lists, or texts) x ``n`` samples each, sampled ids and their
    log-probs returned, ``seed`` (one per call) when not None, ``sampling`` (vLLM's sampling fields) pinned."""
    body = {"model": model, "prompt": prompts, "n": n, "max_tokens": max_tokens,
            "temperature": temperature, "top_p": top_p, **sampling,
            "stop": list(stop), "logprobs": 1,
            "return_tokens_as_token_ids": True, "add_special_tokens": False,
            "skip_special_tokens": True}
    if seed is not None:
        body["seed"] = seed
    return body


def _token_sample(choice: dict, k: int, what: str, context: Callable[[], str]) -> Sample:
    """Choice ``k`` as a :class:`Sample` with its token ids and log-probs (same length)."""
    try:
        lp = choice["logprobs"]
        ids = choice.get("token_ids") or [parse_token_id(t, what) for t in lp["tokens"]]
        logprobs = [float(x) for x in lp["token_logprobs"]]
        if len(ids) != len(logprobs):
            raise ValueError(f"{len(ids)} tokens but {len(logprobs)} log-probs")
        return Sample(text=choice["text"], token_ids=[int(t) for t in ids], logprobs=logprobs,
                      finish_reason=_finish_reason(choice))
    except (KeyError, TypeError, ValueError) as e:
        raise ServerResponseError(f"{what}: choice {k} is malformed ({type(e).__name__}: {e})"
                                  f"{context()}") from e


def parse_token_choices(out, n_prompts: int, n: int, what: str, context: Callable[[], str]) -> list[list[Sample]]:
    """The reply ``out`` (parsed JSON) to :func:`token_completion_body` as ``samples[prompt][sample]``
    (``n_prompts`` x ``n``): exactly ``n_prompts * n`` choices, each index once, each well formed."""
    choices = out.get("choices") if isinstance(out, dict) else None
    if not isinstance(choices, list):
        raise ServerResponseError(f"{what}: response has no 'choices' list: {str(out)[:300]}{context()}")
    want = n_prompts * n
    if len(choices) != want:
        raise ServerResponseError(f"{what}: asked for {want} samples ({n_prompts} prompts x n={n}), "
                                  f"server returned {len(choices)}{context()}")
    by_index: dict[int, dict] = {}
    for k, ch in enumerate(choices):
        idx = ch.get("index", k) if isinstance(ch, dict) else None
        if idx is None or idx in by_index or not 0 <= idx < want:
            raise ServerResponseError(f"{what}: bad or duplicate choice index {idx!r}{context()}")
        by_index[idx] = ch
    return [[_token_sample(by_index[p * n + j], p * n + j, what, context) for j in range(n)]
            for p in range(n_prompts)]


def prompt_logprobs_body(model: str, chunk: list[list[int]]) -> dict:
    """The body of one prompt log-probs call for the token-id sequences ``chunk`` (one token generated, ignored)."""
    return {"model": model, "prompt": chunk, "n": 1, "max_tokens": 1, "temperature": 0.0,
            "prompt_logprobs": 1, "add_special_tokens": False}


def parse_prompt_logprobs(out, chunk: list[list[int]], what: str, context: Callable[[], str]) -> list[list[float]]:
    """The reply ``out`` to :func:`prompt_logprobs_body` as ``[log p(x_t | x_<t) for t in 1..L-1]`` for each
    sequence of ``chunk`` (length ``L``), in ``chunk``'s order."""
    choices = out.get("choices") if isinstance(out, dict) else None
    if not isinstance(choices, list) or len(choices) != len(chunk):
        raise ServerResponseError(f"{what}: expected {len(chunk)} choices, got "
                                  f"{len(choices) if isinstance(choices, list) else str(out)[:200]}{context()}")
    out_all: list[list[float]] = []
    for k, ch in enumerate(sorted(choices, key=lambda c: c.get("index", 0))):
        ids = chunk[k]
        try:
            plp = ch["prompt_logprobs"]
            if len(plp) != len(ids):
                raise ValueError(f"{len(plp)} prompt log-prob entries for {len(ids)} prompt tokens")
            out_all.append([float(plp[t][str(ids[t])]["logprob"]) for t in range(1, len(ids))])
        except (KeyError, TypeError, ValueError) as e:
            raise ServerResponseError(f"{what}: sequence {k} has malformed prompt_logprobs "
                                      f"({type(e).__name__}: {e}){context()}") from e
    return out_all


def text_completion_body(model: str, text: str, request: GenerationRequest, sample: int, *, sampling: dict) -> dict:
    """The body of one call to a server that is not vLLM: sample ``sample`` of ``request``, rendered to ``text``, with
    ``sampling`` (that server's own sampling fields); a seeded request with ``n > 1`` gives sample ``j`` the seed
    ``derive_seed(seed, j)``."""
    r = request
    body = {"model": model, "prompt": text, "n": 1, "max_tokens": r.max_new_tokens,
            "temperature": float(r.temperature), "top_p": float(r.top_p), **sampling}
    if r.stop:
        body["stop"] = list(r.stop)
    if r.seed is not None:
        body["seed"] = r.seed if r.n == 1 else derive_seed(r.seed, sample)
    return body


def parse_text_choice(out, what: str, context: Callable[[], str]) -> Sample:
    """The reply ``out`` to :func:`text_completion_body` as a text-only :class:`Sample` (no token ids or log-probs)."""
    choices = out.get("choices") if isinstance(out, dict) else None
    if not isinstance(choices, list) or len(choices) != 1 or not isinstance(choices[0], dict):
        raise ServerResponseError(f"{what}: expected one choice, got {str(out)[:300]}{context()}")
    ch = choices[0]
    if not isinstance(ch.get("text"), str):
        raise ServerResponseError(f"{what}: the choice has no text: {str(ch)[:200]}{context()}")
    return Sample(text=ch["text"], token_ids=[], logprobs=[], finish_reason=_finish_reason(ch))
