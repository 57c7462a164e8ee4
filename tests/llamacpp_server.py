"""A loopback fake of llama-cpp-python's ``llama_cpp.server`` (0.3.x), for CPU tests (127.0.0.1 only).

It reproduces the behaviours that break clients written for vLLM (measured against the real server with
the SmolLM2-135M-Instruct GGUF):

- ``GET /v1/models`` lists the model with ``owned_by: "me"``; there is no ``GET /health`` (404).
- ``POST /v1/completions`` takes text prompts only. Token-id prompts and out-of-range fields (vLLM's
  ``top_k=-1``) are refused as **HTTP 500** whose ``error.message`` is FastAPI's validation text:
  ``"22 validation errors:"`` and one ``{'type': ..., 'loc': ..., 'msg': ..., 'input': ...}`` per line,
  the prompt-union items first (each echoing the whole prompt), the useful field last. A list of
  several prompts gets a bare 500. ``n`` is ignored (one choice), ``repetition_penalty`` and
  ``prompt_logprobs`` are ignored, ``repeat_penalty`` defaults to 1.1, log-prob tokens come back as text.
- ``POST /v1/chat/completions``: one choice whatever ``n``; ``logprobs``/``top_logprobs`` answered from
  ``top_logprobs(body)`` when given.

``generate(prompt, body) -> str`` makes the text: ``prompt`` is the completion prompt (str) or the chat
messages (list). ``srv.requests`` records ``(path, body)``; ``srv.effective`` the sampling settings the
fake server would have used for each generation (``repeat_penalty``, ``top_k``, ``min_p``).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL_NAME = "smollm2-135m-instruct-q4_1.gguf"
DEFAULTS = {"repeat_penalty": 1.1, "top_k": 40, "min_p": 0.05}


class _Invalid(Exception):
    def __init__(self, items):
        super().__init__(f"{len(items)} validation errors")
        self.items = items


def _validate(body: dict) -> None:
    items = []
    prompt = body.get("prompt", "")
    if not (isinstance(prompt, str) or (isinstance(prompt, list) and all(isinstance(p, str) for p in prompt))):
        for k in range(21):  # pydantic's Union[str, List[str]] branches, per element: one item each
            items.append({"type": "string_type", "loc": ("body", "prompt", "str" if k == 0 else f"list[str]",
                                                         k), "msg": "Input should be a valid string",
                          "input": prompt})
    for name, low in (("top_k", 0), ("min_p", 0.0), ("repeat_penalty", 0.0), ("max_tokens", 0)):
        v = body.get(name)
        if v is not None and v < low:
            items.append({"type": "greater_than_equal", "loc": ("body", name),
                          "msg": f"Input should be greater than or equal to {low}", "input": v, "ctx": {"ge": low}})
    if items:
        raise _Invalid(items)


class LlamaCppFakeServer:
    def __init__(self, generate, *, model_name: str = MODEL_NAME, top_logprobs=None):
        self.generate, self.model_name, self.top_logprobs = generate, model_name, top_logprobs
        self.requests: list[tuple[str, dict]] = []
        self.effective: list[dict] = []
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                if self.path == "/v1/models":
                    return self._send(200, {"object": "list", "data": [
                        {"id": outer.model_name, "object": "model", "owned_by": "me", "permissions": []}]})
                self._send(404, {"detail": "Not Found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
                with outer._lock:
                    outer.requests.append((self.path, body))
                try:
                    if self.path == "/v1/completions":
                        return self._send(200, outer._completion(body))
                    if self.path == "/v1/chat/completions":
                        return self._send(200, outer._chat(body))
                    return self._send(404, {"detail": "Not Found"})
                except _Invalid as e:
                    lines = "\n".join(f"  {item!r}" for item in e.items)
                    return self._send(500, {"error": {"message": f"{len(e.items)} validation errors:\n{lines}",
                                                      "type": "internal_server_error", "param": None, "code": None}})
                except _Bare:
                    return self._send(500, b"Internal Server Error", "text/plain")

            def _send(self, code, obj, ctype="application/json"):
                data = obj if isinstance(obj, bytes) else json.dumps(obj).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def _settings(self, body: dict) -> dict:
        eff = {k: body.get(k, v) for k, v in DEFAULTS.items()}  # repetition_penalty: not its name, ignored
        with self._lock:
            self.effective.append(eff)
        return eff

    def _completion(self, body: dict) -> dict:
        _validate(body)
        prompt = body.get("prompt", "")
        if isinstance(prompt, list):
            if len(prompt) != 1:
                raise _Bare()
            prompt = prompt[0]
        self._settings(body)
        text = self.generate(prompt, body)
        ch = {"index": 0, "text": text, "finish_reason": "stop", "logprobs": None}
        if body.get("logprobs"):
            ch["logprobs"] = {"tokens": list(text[:3]), "token_logprobs": [-0.1] * len(text[:3]),
                              "text_offset": [0, 1, 2][:len(text)], "top_logprobs": None}
        return {"id": "cmpl-fake", "object": "text_completion", "model": body.get("model"), "choices": [ch]}

    def _chat(self, body: dict) -> dict:
        _validate(body)
        self._settings(body)
        text = self.generate(body["messages"], body)
        ch = {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
        if body.get("logprobs") and self.top_logprobs is not None:
            top = self.top_logprobs(body)
            ch["logprobs"] = {"content": [{"token": top[0]["token"], "logprob": top[0]["logprob"],
                                           "top_logprobs": top}]}
        return {"id": "chat-fake", "object": "chat.completion", "model": body.get("model"), "choices": [ch]}

    def __enter__(self) -> "LlamaCppFakeServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Bare(Exception):
    pass
