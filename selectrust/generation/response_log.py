"""An evaluation keeps its work: every finished generation is appended to ``<out_dir>/responses.jsonl`` as it
arrives, and a rerun into the same ``out_dir`` reuses the saved ones whose request matches.

:class:`ResponseLog` wraps the generation backend of a family's run (:func:`eval_hooks.evaluate.run_matched_eval`
wraps it for every family and backend). It sends the requests that have no saved answer to the backend in chunks
(:data:`CHUNK` requests, or the backend's ``batch_size`` when larger) and appends each chunk's results, flushed and
fsynced, before the next chunk starts: a failure (a server that dies, Ctrl-C) loses at most the chunk in flight.

One line per finished request::

    {"key": "<sha256>", "row_id": "q1/clean", "samples": [{"text": "Paris", "finish_reason": "stop",
                                                            "null_content": false}]}

``key`` is the sha256 of the request (prompt or chat messages, ``n``, ``max_new_tokens``, ``temperature``,
``top_p``, ``stop``, ``seed``, adapter), the backend's prompt settings (template switch, chat-template options)
and the backend's identity (:meth:`~selectrust.generation.backends.base.GenerationBackend.identity`: model or server, served
model name, adapter, a fingerprint of in-process weights). A saved line is reused only for a request with the same
key, each line once (two identical sampled requests get two saved samples, never one twice). A backend without an
identity (None) has its responses saved but never reused. ``row_id`` is for the reader (the generic run names the
row; other calls, e.g. MedCounterfact's pipelines, leave it out). A torn last line (a kill mid-write) is skipped.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from collections import defaultdict, deque
from pathlib import Path
from typing import Sequence

from .backends.base import GenerationBackend, GenerationRequest, GenerationResult, Sample
from selectrust.core.io import dumps_line

RESPONSES_FILE = "responses.jsonl"

__all__ = ["RESPONSES_FILE", "CHUNK", "ResponseLog", "read_saved", "request_key"]
#: requests sent to the backend between two appends (at least; a backend's larger ``batch_size`` wins)
CHUNK = 16


def request_key(req: GenerationRequest, context: dict) -> str:
    """The sha256 of ``req`` under ``context`` (prompt settings and backend identity)."""
    blob = {"prompt": req.prompt, "messages": req.messages, "n": req.n, "max_new_tokens": req.max_new_tokens,
            "temperature": float(req.temperature), "top_p": float(req.top_p), "stop": list(req.stop),
            "seed": req.seed, "adapter": req.adapter, **context}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()


def read_saved(path: Path) -> tuple[dict[str, deque], int]:
    """``({key: deque of saved sample lists}, lines skipped)`` of a responses file (absent: nothing saved)."""
    saved: dict[str, deque] = defaultdict(deque)
    skipped = 0
    if not path.exists():
        return saved, 0
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            try:
                rec = json.loads(line)
                samples = [Sample(text=s["text"], token_ids=[], logprobs=[], finish_reason=s["finish_reason"],
                                  null_content=bool(s.get("null_content", False))) for s in rec["samples"]]
                saved[rec["key"]].append(samples)
            except (json.JSONDecodeError, KeyError, TypeError):
                skipped += 1
    return saved, skipped


class ResponseLog(GenerationBackend):
    """``inner`` with its finished generations appended to ``path`` and saved ones reused (module docstring).
    Every other attribute is ``inner``'s. :attr:`reused` and :attr:`generated` count requests."""

    def __init__(self, inner: GenerationBackend, path: str | Path):
        self.inner = inner
        self.name = inner.name
        self.path = Path(path)
        identity = inner.identity() if hasattr(inner, "identity") else None  # a duck-typed backend: unknown
        settings = getattr(inner, "prompt_settings", None)
        self.context = {"backend": identity, "prompt_settings": settings.describe() if settings is not None else None}
        self.saved, skipped = read_saved(self.path) if identity is not None else ({}, 0)
        n_saved = sum(len(v) for v in self.saved.values())
        self.reused = self.generated = 0
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = open(self.path, "a+", encoding="utf-8")
        self._fh.seek(0, os.SEEK_END)
        if self._fh.tell():  # a torn last line gets its own line; the next record starts clean
            self._fh.seek(self._fh.tell() - 1)
            last = self._fh.read(1)
            if last != "\n":
                self._fh.write("\n")
        if identity is None:
            note = "saving responses; this backend states no identity, so saved responses are never reused"
        else:
            note = f"{n_saved} saved response line(s) found" + (f", {skipped} unreadable line(s) skipped" if skipped
                                                               else "")
        print(f"eval: {self.path}: {note}", file=sys.stderr)

    def __getattr__(self, attr):  # only called for attributes not found on the log itself
        return getattr(self.__dict__["inner"], attr)

    def identity(self) -> dict | None:
        return self.context["backend"]

    def generate(self, requests: Sequence[GenerationRequest], *, progress: bool = False, desc: str = "generate",
                 row_ids: Sequence[str] | None = None) -> list[GenerationResult]:
        """As ``inner.generate``, with saved answers reused and fresh ones appended chunk by chunk; ``row_ids``
        (one per request) are written beside them for the reader."""
        from tqdm.auto import tqdm  # deferred: imports tqdm

        keys = [request_key(r, self.context) for r in requests]
        out: list[GenerationResult | None] = [None] * len(requests)
        for i, k in enumerate(keys):
            if self.saved.get(k):
                out[i] = GenerationResult(request=requests[i], samples=self.saved[k].popleft())
        todo = [i for i in range(len(requests)) if out[i] is None]
        self.reused += len(requests) - len(todo)
        chunk = max(CHUNK, int(getattr(self.inner, "batch_size", 0) or 0))
        bar = tqdm(total=len(todo), desc=desc, disable=not progress or not todo, unit="request")
        try:
            for start in range(0, len(todo), chunk):
                part = todo[start:start + chunk]
                results = self.inner.generate([requests[i] for i in part], progress=False, desc=desc)
                if len(results) != len(part):
                    raise RuntimeError(f"backend returned {len(results)} results for {len(part)} requests")
                for i, res in zip(part, results):
                    out[i] = res
                    rec = {"key": keys[i], **({"row_id": row_ids[i]} if row_ids is not None else {}),
                           "samples": [{"text": s.text, "finish_reason": s.finish_reason,
                                        "null_content": getattr(s, "null_content", False)} for s in res.samples]}
                    self._fh.write(dumps_line(rec))
                self._fh.flush()
                os.fsync(self._fh.fileno())
                self.generated += len(part)
                bar.update(len(part))
        finally:
            bar.close()
        return out

    def score_labels(self, prompts, labels):
        return self.inner.score_labels(prompts, labels)

    def load_adapter(self, path: str, version: str) -> None:
        self.inner.load_adapter(path, version)

    def close(self) -> None:
        """Close the responses file (the inner backend stays open: its owner closes it)."""
        if not self._fh.closed:
            self._fh.close()
