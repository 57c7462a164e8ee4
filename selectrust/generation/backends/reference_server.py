"""Loopback reference server: the subset of vLLM's OpenAI-compatible HTTP API that
:class:`~selectrust.generation.backends.vllm_server.VLLMServerBackend` uses, served by :class:`HFBackend` on
CPU, so CI tests the whole protocol without vLLM.

API
---
In process (tests)::

    server = ReferenceServer(model, tokenizer, model_name="tiny").start()   # thread, port 0
    backend = VLLMServerBackend(server.url, "tiny", tokenizer)
    server.faults.drop_connections = 1      # fault injection, see :class:`Faults`
    server.shutdown()

As a process (what ``launch/vllm_launcher.py`` starts with ``kind="reference"``)::

    python -m selectrust.generation.backends.reference_server --model tiny --port 0 [--served-model-name NAME]

prints ``reference_server: listening on http://127.0.0.1:<port>`` once it accepts connections. A bad input (a
non-loopback ``--host``, a ``--model`` that cannot load: missing, empty or without config.json, a file that is no
GGUF, a ``pkg:`` package not installed, ...) is one line ``error: ...`` on stderr naming it, exit 2, before any
model loads (the error contract of ``eval_hooks/cli_contract.py``, see :func:`cli`).

Endpoints: ``GET /health``, ``GET /v1/models``, ``POST /v1/completions`` (``prompt`` as str, list
of str, token ids or list of token ids; ``n``, ``max_tokens``, ``temperature``, ``top_p``, ``stop``,
``seed``, ``logprobs``, ``prompt_logprobs``, ``return_tokens_as_token_ids``, ``add_special_tokens``;
``top_k``/``min_p``/``repetition_penalty`` accepted only at their neutral values),
``POST /v1/load_lora_adapter`` and ``POST /v1/unload_lora_adapter`` (peft named adapters).
Departures from vLLM: ``top_logprobs`` holds only the chosen token; ``echo`` is refused (use
``prompt_logprobs``); one prompt's ``n`` samples are generated as one batch; with ``seed`` (and
``temperature > 0``) sample ``j`` is drawn from its own generator seeded with ``derive_seed(seed, j)``,
exactly as the in-process HF backend draws it, so seeded samples are reproducible here (and equal to
``HFBackend``'s) but not equal to vLLM's.
Binds to loopback addresses only.

Limits (a client cannot exhaust it): a body over ``max_body_bytes`` is refused with 413 unread, a missing
or invalid ``Content-Length`` (negative, not a number) with 400, a body that does not arrive within
``body_timeout_s`` with 408; a text prompt over ``max_prompt_tokens * MAX_CHARS_PER_TOKEN`` characters is
refused with 413 before it is tokenised, and one over ``max_prompt_tokens`` tokens with 400; a
non-numeric ``n``/``max_tokens``/``temperature``/... gets 400.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import threading
import time
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from selectrust.core.errors import INPUT_EXIT, DataError, describe_error
from .base import derive_seed
from .hf import HFBackend

LOOPBACK = {"127.0.0.1", "localhost", "::1"}
MAX_CHARS_PER_TOKEN = 16  # a bound on characters before tokenising (real tokens average ~4)


@dataclass
class Faults:
    """Fault injection for tests. Each counter says how many of the next requests get that fault.

A request claims its faults when it arrives (:meth:`claim`, atomically), so a slow request left over
from an earlier test, which arrived before a fault was set, can never consume it.

    - ``drop_connections``: close the next N connections (any endpoint except /health) without a reply.
    - ``malformed_json``: answer the next N completions with a body that is not JSON.
    - ``fewer_samples``: drop the last choice of the next N completions.
    - ``fail_adapter_loads``: refuse the next N adapter loads with HTTP 400.
    - ``stale_adapter_loads``: acknowledge the next N loads but keep serving the previously loaded
      weights (or the base model) under the new name: the silent stale-weights failure.
    - ``server_errors``: answer the next N completions with HTTP 503.
    - ``lose_replies``: process the next N requests, then close the connection without the reply.
    - ``slow_requests`` / ``delay_s``: sleep ``delay_s`` before answering the next N requests (timeouts).
    """

    drop_connections: int = 0
    malformed_json: int = 0
    fewer_samples: int = 0
    fail_adapter_loads: int = 0
    stale_adapter_loads: int = 0
    server_errors: int = 0
    lose_replies: int = 0
    slow_requests: int = 0
    delay_s: float = 0.0

    def take(self, name: str) -> bool:
        n = getattr(self, name)
        if n > 0:
            setattr(self, name, n - 1)
            return True
        return False

    def claim(self, path: str) -> set[str]:
        """The faults the request to ``path`` that just arrived will exhibit (counters decremented now)."""
        with _FAULT_LOCK:
            if path == "/health":
                return set()
            fired = {"slow_requests"} if self.take("slow_requests") else set()
            if self.take("drop_connections"):
                return fired | {"drop_connections"}
            for name in ROUTE_FAULTS.get(path, ()):
                if self.take(name):
                    fired.add(name)
                    if name in ("server_errors", "fail_adapter_loads"):  # the request fails: nothing else fires
                        return fired
            if self.take("lose_replies"):
                fired.add("lose_replies")
            return fired


_FAULT_LOCK = threading.Lock()
ROUTE_FAULTS = {"/v1/completions": ("server_errors", "fewer_samples", "malformed_json"),
                "/v1/load_lora_adapter": ("fail_adapter_loads", "stale_adapter_loads")}


def check_host(host: str) -> None:
    if host not in LOOPBACK:
        raise ValueError(f"reference server binds to loopback only ({sorted(LOOPBACK)}), got host={host!r}")


class _HTTPError(Exception):
    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code, self.message = code, message


class ReferenceServer:
    """Threaded HTTP server around an HF model (+ peft named adapters). Model calls are serialized."""

    def __init__(self, model, tokenizer, *, model_name: str = "base", host: str = "127.0.0.1", port: int = 0,
                 max_body_bytes: int = 8 << 20, max_prompt_tokens: int = 8192, body_timeout_s: float = 30.0):
        check_host(host)
        self.max_body_bytes, self.max_prompt_tokens, self.body_timeout_s = max_body_bytes, max_prompt_tokens, body_timeout_s
        self.base_model = model
        self.tokenizer = tokenizer
        self.model_name = model_name
        self.faults = Faults()
        self.requests_served = 0  # answered 200
        self.requests_received = 0  # every request that reached a handler, faults included
        self._peft = None  # PeftModel once the first adapter is loaded
        self._served: dict[str, str] = {}  # served lora name -> peft adapter holding its weights (None = base)
        self._paths: dict[str, str] = {}
        self._lock = threading.RLock()
        self._request = threading.local()  # .faults: the faults the request this thread serves claimed
        self._counter = 0
        self._thread: threading.Thread | None = None
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):  # keep test output quiet
                pass

            def do_GET(self):
                owner._dispatch(self, "GET")

            def do_POST(self):
                owner._dispatch(self, "POST")

        family = socket.AF_INET6 if ":" in host else socket.AF_INET

        class Server(ThreadingHTTPServer):
            address_family = family
            daemon_threads = True

        self.httpd = Server((host, port), Handler)
        self.host = host
        self.port = self.httpd.server_address[1]

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "ReferenceServer":
        self._thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name=f"reference-server-{self.port}", daemon=True)
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def shutdown(self) -> None:
        if self._thread is not None:
            self.httpd.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self.httpd.server_close()

    def __enter__(self):
        return self.start() if self._thread is None else self

    def __exit__(self, *exc):
        self.shutdown()

    # -- HTTP plumbing --------------------------------------------------------------------------
    def _dispatch(self, h: BaseHTTPRequestHandler, method: str) -> None:
        path = h.path.split("?", 1)[0]
        self.requests_received += 1
        self._request.faults = set()
        try:
            raw = self._read_body(h)
            self._request.faults = self.faults.claim(path)
            if self._fault("slow_requests"):
                time.sleep(self.faults.delay_s)
            if self._fault("drop_connections"):
                h.close_connection = True
                with contextlib.suppress(OSError):
                    h.connection.shutdown(socket.SHUT_RDWR)
                return
            body = {}
            if method == "POST":
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError as e:
                    raise _HTTPError(400, f"request body is not JSON: {e}")
                if not isinstance(body, dict):
                    raise _HTTPError(400, "request body must be a JSON object")
            route = {("GET", "/health"): lambda b: "",
                     ("GET", "/v1/models"): self._models,
                     ("POST", "/v1/completions"): self._completions,
                     ("POST", "/v1/load_lora_adapter"): self._load_lora,
                     ("POST", "/v1/unload_lora_adapter"): self._unload_lora}.get((method, path))
            if route is None:
                raise _HTTPError(404, f"no route {method} {path}")
            result = route(body)
            self.requests_served += 1
            if self._fault("lose_replies"):
                h.close_connection = True
                with contextlib.suppress(OSError):
                    h.connection.shutdown(socket.SHUT_RDWR)
                return
            if isinstance(result, bytes):  # pre-encoded (fault injection)
                self._send(h, 200, result, "application/json")
            elif isinstance(result, str):
                self._send(h, 200, result.encode(), "text/plain")
            else:
                self._send(h, 200, json.dumps(result).encode(), "application/json")
        except _HTTPError as e:
            err = {"error": {"message": e.message, "type": "BadRequestError" if e.code < 500 else "ServerError",
                             "code": e.code}}
            self._send(h, e.code, json.dumps(err).encode(), "application/json")
        except Exception as e:  # a bug in a handler must answer 500, not hang the client
            err = {"error": {"message": f"{type(e).__name__}: {e}", "type": "InternalServerError", "code": 500}}
            with contextlib.suppress(OSError):
                self._send(h, 500, json.dumps(err).encode(), "application/json")

    def _fault(self, name: str) -> bool:
        return name in getattr(self._request, "faults", ())

    def _read_body(self, h: BaseHTTPRequestHandler) -> bytes:
        """The request body within the limits (see the module docstring); on a refusal the connection is
        closed, as the rest of the body is left unread."""
        header = h.headers.get("Content-Length")
        try:
            length = int(header or 0)
        except ValueError:
            length = -1
        if length < 0 or length > self.max_body_bytes:
            h.close_connection = True
            if length < 0:
                raise _HTTPError(400, f"invalid Content-Length {header!r}")
            raise _HTTPError(413, f"request body of {length} bytes exceeds the limit of {self.max_body_bytes}")
        if not length:
            return b""
        old = h.connection.gettimeout()
        h.connection.settimeout(self.body_timeout_s)
        try:
            raw = h.rfile.read(length)
        except (TimeoutError, socket.timeout):
            h.close_connection = True
            raise _HTTPError(408, f"request body not received within {self.body_timeout_s:g} s") from None
        finally:
            with contextlib.suppress(OSError):
                h.connection.settimeout(old)
        if len(raw) < length:
            h.close_connection = True
            raise _HTTPError(400, f"request body ended after {len(raw)} of {length} bytes (Content-Length)")
        return raw

    @staticmethod
    def _send(h: BaseHTTPRequestHandler, code: int, payload: bytes, ctype: str) -> None:
        h.send_response(code)
        h.send_header("Content-Type", ctype)
        h.send_header("Content-Length", str(len(payload)))
        h.end_headers()
        h.wfile.write(payload)

    # -- endpoints ------------------------------------------------------------------------------
    def _models(self, body: dict) -> dict:
        now = int(time.time())
        data = [{"id": self.model_name, "object": "model", "created": now, "owned_by": "reference",
                 "root": self.model_name, "parent": None}]
        for name, path in self._paths.items():
            data.append({"id": name, "object": "model", "created": now, "owned_by": "reference",
                         "root": path, "parent": self.model_name})
        return {"object": "list", "data": data}

    def _load_lora(self, body: dict) -> str:
        name, path = body.get("lora_name"), body.get("lora_path")
        if not name or not path:
            raise _HTTPError(400, "both 'lora_name' and 'lora_path' must be provided")
        if name in self._served:
            raise _HTTPError(400, f"The lora adapter '{name}' has already been loaded.")
        if self._fault("fail_adapter_loads"):
            raise _HTTPError(400, f"injected fault: failed to load LoRA adapter '{name}' from {path}")
        if not (Path(path) / "adapter_config.json").is_file():
            raise _HTTPError(400, f"Loading lora {name} failed: no adapter_config.json in {path}")
        with self._lock:
            if self._fault("stale_adapter_loads"):
                # keep whatever weights were served last: exactly the silent failure the probe must catch
                previous = list(self._served.values())[-1] if self._served else None
                self._served[name] = previous
            else:
                from peft import PeftModel

                self._counter += 1
                internal = f"a{self._counter}"
                if self._peft is None:
                    self._peft = PeftModel.from_pretrained(self.base_model, path, adapter_name=internal)
                else:
                    self._peft.load_adapter(path, adapter_name=internal)
                self._peft.eval()
                self._served[name] = internal
            self._paths[name] = str(path)
        return f"Success: LoRA adapter '{name}' added successfully."

    def _unload_lora(self, body: dict) -> str:
        name = body.get("lora_name")
        if name not in self._served:
            raise _HTTPError(404, f"The lora adapter '{name}' cannot be found.")
        with self._lock:
            internal = self._served.pop(name)
            self._paths.pop(name, None)
            if internal is not None and internal not in self._served.values():
                if len(self._peft.peft_config) > 1:
                    if internal in self._peft.active_adapters:
                        other = next(a for a in self._peft.peft_config if a != internal)
                        self._peft.set_adapter(other)
                    self._peft.delete_adapter(internal)
                # the last adapter stays in memory (peft cannot delete it); it is unreachable by name
        return f"Success: LoRA adapter '{name}' removed successfully."

    @contextlib.contextmanager
    def _weights(self, model_name: str):
        """Yield the module that computes under ``model_name`` (base or a served adapter)."""
        if model_name != self.model_name and model_name not in self._served:
            raise _HTTPError(404, f"The model `{model_name}` does not exist.")
        with self._lock:
            internal = self._served.get(model_name)
            if self._peft is None:
                yield self.base_model
            elif internal is None:
                with self._peft.disable_adapter():
                    yield self._peft
            else:
                self._peft.set_adapter(internal)
                yield self._peft

    def _prompts(self, body: dict) -> list[list[int]]:
        p = body.get("prompt")
        add_special = bool(body.get("add_special_tokens", True))

        def enc(text: str) -> list[int]:
            if len(text) > self.max_prompt_tokens * MAX_CHARS_PER_TOKEN:  # bound the tokeniser's work first
                raise _HTTPError(413, f"prompt of {len(text)} characters exceeds the limit of "
                                      f"{self.max_prompt_tokens} tokens")
            return list(self.tokenizer(text, add_special_tokens=add_special)["input_ids"])

        if isinstance(p, str):
            out = [enc(p)]
        elif isinstance(p, list) and p and all(isinstance(x, int) for x in p):
            out = [list(p)]
        elif isinstance(p, list) and p and all(isinstance(x, str) for x in p):
            out = [enc(x) for x in p]
        elif isinstance(p, list) and p and all(isinstance(x, list) and x and all(isinstance(t, int) for t in x)
                                                for x in p):
            out = [list(x) for x in p]
        else:
            raise _HTTPError(400, "'prompt' must be a string, a list of strings, a list of token ids or a list "
                                  "of token id lists (non-empty)")
        vocab = len(self.tokenizer)
        for ids in out:
            if not ids or any(t < 0 or t >= vocab for t in ids):
                raise _HTTPError(400, f"prompt token ids must be in [0, {vocab}) and non-empty")
            if len(ids) > self.max_prompt_tokens:
                raise _HTTPError(400, f"prompt of {len(ids)} tokens exceeds the limit of {self.max_prompt_tokens}")
        return out

    def _completions(self, body: dict):
        if body.get("echo"):
            raise _HTTPError(400, "echo is not supported by the reference server; use prompt_logprobs")
        if body.get("stream"):
            raise _HTTPError(400, "stream is not supported by the reference server")
        if self._fault("server_errors"):
            raise _HTTPError(503, "injected fault: service unavailable")
        model_name = body.get("model") or self.model_name
        prompts = self._prompts(body)
        try:
            n = int(body.get("n", 1))
            max_tokens = int(body.get("max_tokens", 16))
            temperature = float(body.get("temperature", 1.0) if body.get("temperature") is not None else 1.0)
            top_p = float(body.get("top_p") if body.get("top_p") is not None else 1.0)
            prompt_logprobs = None if body.get("prompt_logprobs") is None else int(body["prompt_logprobs"])
        except (TypeError, ValueError) as e:
            raise _HTTPError(400, f"n, max_tokens, temperature, top_p and prompt_logprobs must be numbers ({e})")
        stop = body.get("stop") or []
        stop = [stop] if isinstance(stop, str) else list(stop)
        seed = body.get("seed")
        logprobs = body.get("logprobs")
        as_ids = bool(body.get("return_tokens_as_token_ids"))
        if n < 1 or max_tokens < 1 or not 0 < top_p <= 1 or temperature < 0 or n > 256 \
                or max_tokens > self.max_prompt_tokens:
            raise _HTTPError(400, f"need 1 <= n <= 256, 1 <= max_tokens <= {self.max_prompt_tokens}, 0 < top_p <= 1, "
                                  f"temperature >= 0")
        if body.get("top_k") not in (None, -1, 0) or body.get("min_p") not in (None, 0, 0.0) or \
                body.get("repetition_penalty") not in (None, 1, 1.0):
            raise _HTTPError(400, "the reference server supports only top_k in (-1, 0), min_p=0, repetition_penalty=1")

        choices = []
        with self._weights(model_name) as model:
            hf = HFBackend(model, self.tokenizer)
            was_training = model.training
            model.eval()
            try:
                for i, ids in enumerate(prompts):
                    row_seeds = [derive_seed(seed, j) for j in range(n)] \
                        if seed is not None and temperature > 0 else None
                    samples = hf._generate_batch([ids] * n, max_tokens, temperature, top_p, tuple(stop), None,
                                                 row_seeds=row_seeds)
                    plp = self._prompt_logprobs(model, ids, int(prompt_logprobs)) \
                        if prompt_logprobs is not None else None
                    for j, s in enumerate(samples):
                        ch = {"index": i * n + j, "text": s.text, "finish_reason": s.finish_reason,
                              "stop_reason": None, "logprobs": None}
                        if logprobs is not None:
                            toks = [f"token_id:{t}" if as_ids else self.tokenizer.convert_ids_to_tokens(t)
                                    for t in s.token_ids]
                            offsets, pos = [], 0
                            for t in s.token_ids:
                                offsets.append(pos)
                                pos += len(self.tokenizer.decode([t], skip_special_tokens=True))
                            ch["logprobs"] = {"tokens": toks, "token_logprobs": s.logprobs, "text_offset": offsets,
                                              "top_logprobs": [{tok: lp} for tok, lp in zip(toks, s.logprobs)]}
                        if plp is not None:
                            ch["prompt_logprobs"] = plp
                        choices.append(ch)
            finally:
                if was_training:
                    model.train()
        if self._fault("fewer_samples"):
            choices = choices[:-1]
        out = {"id": f"cmpl-ref-{self.requests_served}", "object": "text_completion", "created": int(time.time()),
               "model": model_name, "choices": choices,
               "usage": {"prompt_tokens": sum(map(len, prompts)),
                         "completion_tokens": 0, "total_tokens": sum(map(len, prompts))}}
        if self._fault("malformed_json"):
            return b'{"id": "cmpl-ref", "choices": [{"index": 0, "text": '  # truncated body
        return out

    def _prompt_logprobs(self, model, ids: list[int], k: int) -> list:
        """vLLM format: ``[None] + [{str(id): {logprob, rank, decoded_token}} per position 1..L-1]``,
        holding the actual token and the top-``k`` tokens."""
        import torch  # deferred: imports torch

        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids], device=next(model.parameters()).device)).logits
        logp = torch.log_softmax(logits[0].float(), dim=-1).cpu()
        out: list = [None]
        for t in range(1, len(ids)):
            row = logp[t - 1]
            entries = {}
            tok = ids[t]
            rank = int((row > row[tok]).sum()) + 1
            entries[str(tok)] = {"logprob": float(row[tok]), "rank": rank,
                                 "decoded_token": self.tokenizer.decode([tok])}
            if k > 0:
                vals, idx = torch.topk(row, k)
                for r, (v, i) in enumerate(zip(vals.tolist(), idx.tolist())):
                    entries.setdefault(str(i), {"logprob": v, "rank": r + 1,
                                                "decoded_token": self.tokenizer.decode([i])})
            out.append(entries)
        return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Loopback reference server speaking the vLLM completions/LoRA API "
                                             "(CPU tests).")
    ap.add_argument("--model", required=True, help="model path, or 'tiny' / 'tiny:<preset>'")
    ap.add_argument("--served-model-name", default=None, help="name clients put in 'model' (default: --model)")
    ap.add_argument("--host", default="127.0.0.1", help="loopback address to bind")
    ap.add_argument("--port", type=int, default=0, help="0 = any free port (printed)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--max-body-bytes", type=int, default=8 << 20, help="larger request bodies get HTTP 413")
    ap.add_argument("--max-prompt-tokens", type=int, default=8192, help="longer prompts get HTTP 400/413")
    args, unknown = ap.parse_known_args(argv)
    try:
        check_host(args.host)  # before the model loads
    except ValueError as e:
        raise DataError(f"--host: {e}") from None
    if unknown:  # vLLM flags the launcher may pass (--enable-lora, ...) are meaningless here
        print(f"reference_server: ignoring vLLM arguments {unknown}", flush=True)

    from selectrust.model import check_model_path, load_model, load_tokenizer  # deferred: tests patch it

    check_model_path(args.model, "--model")  # fail before the slow torch import
    model = load_model(args.model, dtype=args.dtype)
    tok = load_tokenizer(args.model)
    server = ReferenceServer(model, tok, model_name=args.served_model_name or args.model, host=args.host,
                             port=args.port, max_body_bytes=args.max_body_bytes,
                             max_prompt_tokens=args.max_prompt_tokens)
    print(f"reference_server: listening on {server.url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.httpd.server_close()
    return 0


def cli(argv: list[str] | None = None) -> int:
    """:func:`main` under the error contract's rule for a bad input (``eval_hooks/cli_contract.py``, which this
    foundation module cannot import): a :class:`~selectrust.core.errors.DataError` (a bad ``--host``, any
    :class:`~selectrust.model.errors.ModelSourceError` of the model checks and loaders) is one line ``error: ...``
    on stderr, exit :data:`INPUT_EXIT`; anything else (a bug) keeps its traceback."""
    try:
        return main(argv)
    except DataError as e:
        print(f"error: {describe_error(e)}", file=sys.stderr, flush=True)
        return INPUT_EXIT


if __name__ == "__main__":
    raise SystemExit(cli())
