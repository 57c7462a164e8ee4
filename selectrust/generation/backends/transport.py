"""The HTTP layer of the server clients (``vllm_server``, ``openai_chat``): bounded time, bounded size,
the server's own words in every error.

- **Time.** Each attempt has a wall-clock limit (``attempt_timeout_s``, further capped by an optional
  absolute ``deadline`` on ``time.monotonic()`` that covers all attempts and the waits between them). The
  limit bounds the whole attempt, not each socket read: a watchdog shuts the socket down when it
  passes, so a server that sends one byte at a time cannot keep a call alive.
- **Size.** A reply body larger than ``max_body_bytes`` is refused (by its ``Content-Length`` before
  reading, else as soon as the bytes read pass the bound); it is never read whole into memory.
- **Errors.** The message starts with what the server said (OpenAI ``error.message``, a FastAPI/pydantic
  ``detail`` list shown item by item as ``loc: msg (input ...)``, bounded per item and in count), then
  the HTTP status, URL and request. Validation errors (HTTP 422, or any 4xx/5xx whose body is a
  validation error, e.g. llama.cpp's HTTP 500 with a ``detail`` list) are never retried, whatever the
  status. Connection errors (a connection closed mid-body, before ``Content-Length`` bytes came,
  included: ``IncompleteRead``), HTTP 429 and other 5xx are retried; the log says "retrying in X s" only
  when another attempt follows. A server that answered with an error and then stopped answering (a vLLM engine
  that died: HTTP 500, then connection refused) is reported with its last answer, not only as unreachable.
  ``retry_timeouts=False``: an attempt that ran out of time is not repeated (the caller splits the work instead).

Errors raised carry ``attempts`` (how many were made), ``timed_out`` (the limit was hit) and, for
HTTP errors, ``status``.
"""

from __future__ import annotations

import contextlib

import ast
import http.client
import json
import re
import logging
import socket
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Callable
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

#: Default bound on a reply body (a completion reply is kilobytes; prompt log-probs of 64 long prompts, a few
#: megabytes).
DEFAULT_MAX_BODY_BYTES = 16 * 2 ** 20
RETRY_AFTER_CAP_S = 60.0
_DETAIL_ITEMS, _ITEM_CHARS, _TEXT_CHARS = 40, 300, 4000


class ServerError(RuntimeError):
    """Base class of the errors of the server clients. ``attempts``: attempts made; ``timed_out``: the
    time limit ended it; ``status``: the last HTTP status (None when there was no HTTP answer)."""

    def __init__(self, message: str, *, attempts: int = 1, timed_out: bool = False, status: int | None = None,
                 validation: bool = False):
        super().__init__(message)
        self.attempts, self.timed_out, self.status, self.validation = attempts, timed_out, status, validation


class ServerUnreachableError(ServerError):
    """The server did not answer (refused, reset, timed out) after all retries."""


class ServerResponseError(ServerError):
    """The server answered, but not with what was asked (HTTP 4xx, a validation error, malformed JSON,
    missing samples, a body over the size bound)."""


class ServerCapabilityError(ServerError):
    """The server lacks a feature this use needs (e.g. a non-vLLM server asked for prompt log-probs)."""


class BodyTooLarge(Exception):
    pass


# -- the server's message ---------------------------------------------------------------------------
def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n] + f"... [{len(text) - n} more chars]"


def _detail_item(d) -> str:
    if not isinstance(d, dict):
        return _clip(str(d), _ITEM_CHARS)
    loc = ".".join(str(x) for x in (d.get("loc") or []) if x is not None)
    text = f"{loc}: {d.get('msg', d)}" if loc else str(d.get("msg", d))
    if "input" in d:
        text += f" (input {_clip(json.dumps(d['input'], default=str), 80)})"
    return _clip(text, _ITEM_CHARS)


_VALIDATION_HEAD = re.compile(r"^\s*\d+ validation errors?\b", re.I)


def _validation_lines(msg: str) -> str:
    """A validation-error text, one line per item: items that are dict literals (FastAPI's
    ``RequestValidationError`` text) shown as ``loc: msg (input ...)``, other lines clipped; every item kept
    up to a bound, so a useful field listed last is not cut off by an echoed long input."""
    head, *lines = [ln.strip() for ln in msg.strip().splitlines() if ln.strip()]
    items = []
    for ln in lines:
        try:
            d = ast.literal_eval(ln) if ln.startswith("{") else None
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            d = None
        items.append(_detail_item(d) if isinstance(d, dict) else _clip(ln, _ITEM_CHARS))
    more = f"; ... and {len(items) - _DETAIL_ITEMS} more lines" if len(items) > _DETAIL_ITEMS else ""
    return head.rstrip(":") + (": " + "; ".join(items[:_DETAIL_ITEMS]) + more if items else "")


def server_message(body: bytes | str) -> tuple[str, bool]:
    """(the server's own message, whether it is a validation error) of an error reply body."""
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    try:
        obj = json.loads(text)
    except (json.JSONDecodeError, ValueError):
        obj = None
    detail = obj.get("detail") if isinstance(obj, dict) else None
    if isinstance(detail, list) and detail:
        items = [_detail_item(d) for d in detail[:_DETAIL_ITEMS]]
        more = f"; ... and {len(detail) - _DETAIL_ITEMS} more" if len(detail) > _DETAIL_ITEMS else ""
        is_val = all(isinstance(d, dict) and "loc" in d for d in detail)
        return f"{len(detail)} validation error(s): " + "; ".join(items) + more, is_val
    err = obj.get("error") if isinstance(obj, dict) else None
    if isinstance(err, dict) and err.get("message"):
        msg = str(err["message"])
        if _VALIDATION_HEAD.match(msg):  # FastAPI/pydantic text in a message (llama.cpp): item by item
            return _validation_lines(msg), True
        return _clip(msg, _TEXT_CHARS), "validation error" in msg.lower()
    if isinstance(err, str) or isinstance(detail, str):
        msg = str(err if isinstance(err, str) else detail)
        return _clip(msg, _TEXT_CHARS), "validation error" in msg.lower()
    return _clip(text.strip(), _TEXT_CHARS), "validation error" in text.lower()


# -- one attempt ---------------------------------------------------------------------------------------
@dataclass
class Reply:
    status: int
    body: bytes
    headers: dict = field(default_factory=dict)


def _read_bounded(resp, limit_bytes: int) -> bytes:
    length = resp.getheader("Content-Length")
    if length and length.isdigit() and int(length) > limit_bytes:
        raise BodyTooLarge(f"Content-Length {int(length)} bytes")
    chunks, total = [], 0
    while True:
        chunk = resp.read1(65536)
        if not chunk:
            if resp.length:  # the connection closed before Content-Length bytes came: a transport error, retried
                raise http.client.IncompleteRead(b"".join(chunks), resp.length)
            return b"".join(chunks)
        total += len(chunk)
        if total > limit_bytes:
            raise BodyTooLarge(f"more than {limit_bytes} bytes read")
        chunks.append(chunk)


def _attempt(method: str, url: str, data: bytes | None, headers: dict, limit_s: float, max_body_bytes: int) -> Reply:
    """One HTTP exchange that ends within ``limit_s`` seconds (the watchdog shuts the socket down)."""
    u = urllib.parse.urlsplit(url)
    cls = http.client.HTTPSConnection if u.scheme == "https" else http.client.HTTPConnection
    conn = cls(u.hostname, u.port, timeout=limit_s)
    fired = threading.Event()
    end = time.monotonic() + limit_s
    conn.connect()  # bounded by the socket timeout (limit_s)
    sock = conn.sock  # kept: http.client drops conn.sock once a reply says the connection will close

    def watchdog():
        fired.set()
        try:
            sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked read at once
        except OSError:
            pass

    timer = threading.Timer(max(0.0, end - time.monotonic()), watchdog)
    timer.daemon = True
    timer.start()
    resp = None
    try:
        path = u.path + (f"?{u.query}" if u.query else "")
        conn.request(method, path or "/", body=data, headers=headers)
        resp = conn.getresponse()
        body = _read_bounded(resp, max_body_bytes)
        if fired.is_set():
            raise TimeoutError(f"timed out: no complete reply within {limit_s:.3g} s")
        return Reply(resp.status, body, {k.lower(): v for k, v in resp.getheaders()})
    except (OSError, http.client.HTTPException) as e:
        if fired.is_set() and not isinstance(e, TimeoutError):
            raise TimeoutError(f"timed out: no complete reply within {limit_s:.3g} s") from e
        raise
    finally:
        timer.cancel()
        if resp is not None:  # the response holds the socket's file: close it too, so the connection ends
            resp.close()
        conn.close()


# -- with retries ------------------------------------------------------------------------------------
def _wait_s(backoff_s: float, attempt: int, retry_after: str | None) -> float:
    wait = backoff_s * 2 ** attempt
    try:
        return max(wait, min(float(retry_after), RETRY_AFTER_CAP_S)) if retry_after else wait
    except ValueError:  # an HTTP-date Retry-After: keep the exponential backoff
        return wait


def request(method: str, url: str, payload: dict | None, what: str, *, attempt_timeout_s: float,
            max_retries: int, backoff_s: float, deadline: float | None = None, headers: dict | None = None,
            max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, retry_429: bool = True, client: str = "server",
            unreachable_hint: str = "", context: Callable[[], str] = lambda: "", retry_timeouts: bool = True) -> Reply:
    """``method url`` with bounded retries; the successful (2xx) :class:`Reply`, or raise a :class:`ServerError`.

    ``deadline`` (``time.monotonic()`` value) bounds all attempts and waits together; ``attempt_timeout_s``
    bounds each attempt. ``context()`` is appended to errors (e.g. a server log tail)."""
    data = json.dumps(payload).encode() if payload is not None else None
    hdrs = dict(headers or {})
    if data is not None:
        hdrs.setdefault("Content-Type", "application/json")
    total = max_retries + 1
    last: ServerError | None = None
    said: str | None = None  # the server's last error answer, kept when a later attempt gets no answer at all
    made, deadline_hit = 0, False
    for attempt in range(1, total + 1):
        limit = attempt_timeout_s if deadline is None else min(attempt_timeout_s, deadline - time.monotonic())
        if limit <= 0:
            break
        made = attempt
        try:
            reply = _attempt(method, url, data, hdrs, limit, max_body_bytes)
        except BodyTooLarge as e:
            raise ServerResponseError(f"reply from {url} for {what} is larger than the {max_body_bytes}-byte bound "
                                      f"({e}); refused{context()}", attempts=attempt) from None
        except (OSError, http.client.HTTPException) as e:
            timed_out = isinstance(e, (TimeoutError, socket.timeout))
            last = ServerUnreachableError(f"{type(e).__name__}: {e}", attempts=attempt, timed_out=timed_out)
            status, msg = None, f"{type(e).__name__}: {e}"
            retry_after = None
            if timed_out and not retry_timeouts:
                log.warning("%s: %s on %s (attempt %d/%d), not repeated", client, msg, url, attempt, total)
                break
        else:
            if 200 <= reply.status < 300:
                return reply
            msg, validation = server_message(reply.body)
            status = reply.status
            validation = validation or status == 422
            err = f"{msg} (HTTP {status} from {url} for {what})"
            retryable = not validation and (status >= 500 or (status == 429 and retry_429))
            if not retryable:
                why = "; a validation error, not retried" if validation else ""
                raise ServerResponseError(f"{err}{why}{context()}", attempts=attempt, status=status,
                                          validation=validation)
            last = ServerResponseError(err, attempts=attempt, status=status)
            said = err
            retry_after = reply.headers.get("retry-after")
        wait = _wait_s(backoff_s, attempt - 1, retry_after)
        fits = deadline is None or time.monotonic() + wait < deadline
        deadline_hit = deadline_hit or (attempt < total and not fits)
        more = attempt < total and fits
        log.warning("%s: %s on %s (attempt %d/%d)%s", client, msg if status is None else f"HTTP {status}", url,
                    attempt, total, f", retrying in {wait:.2g} s" if more else ", giving up")
        if not more:
            break
        time.sleep(wait)
    past = deadline_hit or deadline is not None and time.monotonic() >= deadline - 1e-3
    timed_out = past or bool(last is not None and last.timed_out)
    when = f"after {made} attempt{'s' if made != 1 else ''}" + (
        f" (the {client} deadline was reached)" if past else "")
    if isinstance(last, ServerResponseError):
        raise ServerResponseError(f"{last} {when}{context()}", attempts=made, timed_out=timed_out,
                                  status=last.status) from None
    cause = f" ({last})" if last is not None else ""
    before = f" It had answered an earlier attempt with an error: {said}." if said else ""
    raise ServerUnreachableError(f"{client} at {url} is unreachable{cause} for {what}, {when}.{before}"
                                 f"{unreachable_hint}{context()}", attempts=made, timed_out=timed_out) from None


def parse_json(reply: Reply, url: str, what: str, context: Callable[[], str] = lambda: ""):
    try:
        return json.loads(reply.body)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ServerResponseError(f"malformed JSON from {url} for {what}: {e}; body starts "
                                  f"{reply.body[:200]!r}{context()}") from None


@contextlib.contextmanager
def request_pool(workers: int):
    """A ``ThreadPoolExecutor`` of ``workers`` HTTP request threads that, when the block ends in an error or a stop
    (SIGTERM, Ctrl-C), is shut down without waiting: requests not started are cancelled, and one in flight is
    left to its timeout instead of holding the stop up (the entry point exits without joining it:
    ``eval_hooks.cli_contract.end_process``)."""
    pool = ThreadPoolExecutor(max_workers=workers)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
