"""A loopback OpenAI-compatible ``/v1/chat/completions`` server for tests (no network beyond 127.0.0.1).

    with ChatServer(reply) as srv:          # reply(body: dict, k: int) -> str  (k = choice index); port=0: any
        backend = OpenAIChatBackend(srv.url, "m")

``srv.requests`` records every request body and its headers; ``srv.fail_next`` is a list of HTTP
status codes to answer (one per request) before replying normally; ``srv.top_logprobs(body)`` may be
overridden through ``logprobs=`` (a function body -> list of {"token", "logprob"}).

Faults for the client's bounds: ``drip_s`` sends the reply one byte every ``drip_s`` seconds (a slow
server); ``pad_bytes`` pads the reply JSON with that many spaces (a huge body); ``shape_choices(choices)``
rewrites the choices before they are sent (repeated or missing indexes); ``srv.cut_next`` (a count) sends that
many 200 replies with their full ``Content-Length`` but only half the body, then closes the connection.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class ChatServer:
    def __init__(self, reply, *, logprobs=None, retry_after: str | None = None, drip_s: float = 0.0,
                 pad_bytes: int = 0, shape_choices=None, port: int = 0):
        self.reply, self.logprobs, self.retry_after = reply, logprobs, retry_after
        self.drip_s, self.pad_bytes, self.shape_choices = drip_s, pad_bytes, shape_choices
        self.drip_stopped = threading.Event()
        self.requests: list[dict] = []
        self.headers: list[dict] = []
        self.fail_next: list[int] = []
        self.cut_next = 0
        self.error_body: dict = {"error": "injected"}  # the body of the fail_next answers
        self._lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):  # keep test output clean
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer._lock:
                    outer.requests.append(body)
                    outer.headers.append(dict(self.headers))
                    fail = outer.fail_next.pop(0) if outer.fail_next else None
                if self.path != "/v1/chat/completions":
                    return self._send(404, {"error": f"no route {self.path}"})
                if fail is not None:
                    return self._send(fail, outer.error_body, retry=True)
                choices = []
                for k in range(body.get("n", 1)):
                    ch = {"index": k, "finish_reason": "stop",
                          "message": {"role": "assistant", "content": outer.reply(body, k)}}
                    if body.get("logprobs") and outer.logprobs is not None:
                        ch["logprobs"] = {"content": [{"token": "?", "logprob": 0.0,
                                                       "top_logprobs": outer.logprobs(body)}]}
                    choices.append(ch)
                if outer.shape_choices is not None:
                    choices = outer.shape_choices(choices)
                self._send(200, {"id": "x", "object": "chat.completion", "model": body.get("model"),
                                 "choices": choices})

            def _send(self, code, obj, retry=False):
                data = json.dumps(obj).encode() + b" " * (outer.pad_bytes if code == 200 else 0)
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                if retry and outer.retry_after is not None:
                    self.send_header("Retry-After", outer.retry_after)
                self.end_headers()
                with outer._lock:
                    cut = code == 200 and outer.cut_next > 0
                    outer.cut_next -= cut
                if cut:  # half the promised body, then the connection closes
                    self.wfile.write(data[:len(data) // 2])
                    self.wfile.flush()
                    self.close_connection = True
                    return
                if code == 200 and outer.drip_s:
                    try:
                        for i in range(len(data)):
                            self.wfile.write(data[i:i + 1])
                            self.wfile.flush()
                            time.sleep(outer.drip_s)
                    except OSError:  # the client gave up and closed the connection
                        outer.drip_stopped.set()
                    return
                if code == 200 and outer.pad_bytes:
                    try:
                        for i in range(0, len(data), 1 << 20):
                            self.wfile.write(data[i:i + (1 << 20)])
                    except OSError:  # the client refused the body and closed the connection
                        pass
                    return
                self.wfile.write(data)

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "ChatServer":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()


def unused_port() -> int:
    """A loopback port nobody listens on (bound, read and released): for unreachable-server tests and for a
    server the test starts itself."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
