"""The reference server's limits (issue: one 50 MB prompt took it from 0.4 to 8.4 GB; a Content-Length
larger than the body, or -1, held a handler thread forever; ``max_tokens: "abc"`` answered 500)."""

from __future__ import annotations

import json
import socket

import pytest

from selectrust.generation.backends.reference_server import MAX_CHARS_PER_TOKEN, ReferenceServer


@pytest.fixture(scope="module")
def server(tiny_model_dir, tiny_tokenizer):
    from selectrust.model import load_model

    srv = ReferenceServer(load_model(str(tiny_model_dir)), tiny_tokenizer, model_name="tiny", max_body_bytes=100_000,
                          max_prompt_tokens=64, body_timeout_s=1.0).start()
    yield srv
    srv.shutdown()


def _raw(server, head: bytes, body: bytes = b"", *, wait_s: float = 10.0) -> tuple[int, dict]:
    """Send raw bytes, return (status, JSON body); fails the test if no reply comes within ``wait_s``."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=wait_s) as s:
        s.sendall(head + body)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    status = int(data.split(b" ", 2)[1])
    return status, json.loads(data.split(b"\r\n\r\n", 1)[1] or b"{}")


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":")[1])
    return 0


def _post(server, payload: dict | bytes, *, length: int | str | None = None) -> tuple[int, dict]:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n").encode()
    return _raw(server, head, body)


def test_body_over_the_limit_is_413_without_reading_it(server):
    status, body = _post(server, b"x" * 10, length=50_000_000)
    assert status == 413 and "exceeds the limit of 100000" in body["error"]["message"]


@pytest.mark.parametrize("length", ["-1", "abc"])
def test_invalid_content_length_is_400_not_a_hang(server, length):
    status, body = _post(server, b'{"prompt": "hi"}', length=length)   # a hang fails at _raw's socket timeout
    assert status == 400 and body["error"]["message"] == f"invalid Content-Length {length!r}"


def test_content_length_larger_than_the_body_times_out_with_408(server):
    status, body = _post(server, b'{"prompt": "hi"}', length=1000)  # 16 bytes sent, 1000 announced
    # the server's body_timeout_s (1 s) fired: 408, not the 400 of a body that ended early
    assert status == 408 and body["error"]["message"] == "request body not received within 1 s"


class _CountingTokenizer:
    """The server's tokenizer, counting the texts it is asked to tokenise."""

    def __init__(self, tok):
        self.tok, self.texts = tok, []

    def __call__(self, text, **kwargs):
        self.texts.append(text)
        return self.tok(text, **kwargs)

    def __getattr__(self, name):
        return getattr(self.tok, name)

    def __len__(self):
        return len(self.tok)


def test_long_prompt_is_refused_before_tokenising(server, monkeypatch):
    counting = _CountingTokenizer(server.tokenizer)
    monkeypatch.setattr(server, "tokenizer", counting)
    status, body = _post(server, {"model": "tiny", "prompt": "word " * 20_000, "max_tokens": 2})  # 100k chars
    assert status == 413 and "exceeds the limit of 100000" in body["error"]["message"]   # the body limit
    n = 64 * MAX_CHARS_PER_TOKEN + 1                                                      # a small body
    status, body = _post(server, {"model": "tiny", "prompt": "w" * n, "max_tokens": 2})
    assert status == 413 and body["error"]["message"] == f"prompt of {n} characters exceeds the limit of 64 tokens"
    assert counting.texts == []                        # neither was tokenised
    status, body = _post(server, {"model": "tiny", "prompt": "hello " * 100, "max_tokens": 2})  # ~100 tokens > 64
    assert status == 400 and "tokens exceeds the limit of 64" in body["error"]["message"]
    assert counting.texts == ["hello " * 100]


@pytest.mark.parametrize("field", ["max_tokens", "n", "temperature"])
def test_non_numeric_sampling_fields_are_400(server, field):
    status, body = _post(server, {"model": "tiny", "prompt": "hi", "max_tokens": 2, field: "abc"})
    assert status == 400 and "must be numbers" in body["error"]["message"]


def test_a_valid_request_still_works_after_the_refusals(server):
    status, body = _post(server, {"model": "tiny", "prompt": "hi", "max_tokens": 2})
    assert status == 200 and len(body["choices"]) == 1


def test_non_loopback_host_is_refused_before_the_model_loads(monkeypatch):
    from selectrust.generation.backends.reference_server import main

    import selectrust.model as em

    for name in ("check_model_path", "load_model", "load_tokenizer"):
        monkeypatch.setattr(em, name, lambda *a, **k: pytest.fail("the model was looked at before the host check"))
    with pytest.raises(ValueError, match="loopback only"):
        main(["--model", "/nonexistent/model", "--host", "0.0.0.0"])
