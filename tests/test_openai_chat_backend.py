"""OpenAIChatBackend against a loopback chat-completions server (no external network)."""

import math
import socket

import pytest

from eval_hooks.backends import GenerationRequest
from eval_hooks.backends.openai_chat import (OpenAIChatBackend, ServerResponseError, ServerUnreachableError,
                                             chat_url)
from tests._chat_server import ChatServer


def echo(body, k):
    return f"{body['messages'][-1]['content']}|{k}|seed={body.get('seed')}"


def test_chat_url():
    assert chat_url("http://h:1") == "http://h:1/v1/chat/completions"
    assert chat_url("https://api.x.com/v1/") == "https://api.x.com/v1/chat/completions"


def test_generate_prompt_messages_n_and_body(monkeypatch):
    monkeypatch.setenv("TEST_CHAT_KEY", "sekret")
    with ChatServer(echo) as srv:
        b = OpenAIChatBackend(srv.url, "judge-1", api_key_env="TEST_CHAT_KEY", system_prompt="be brief",
                              extra_body={"reasoning_effort": "low"}, concurrency=2)
        res = b.generate([GenerationRequest(prompt="hello", n=2, max_new_tokens=7, stop=["\n\n"], seed=5),
                          GenerationRequest(messages=[{"role": "system", "content": "S"},
                                                      {"role": "user", "content": "q2"}])])
    assert [s.text for s in res[0].samples] == ["hello|0|seed=5", "hello|1|seed=5"]
    assert [s.text for s in res[1].samples] == ["q2|0|seed=None"]
    assert res[0].samples[0].token_ids == [] and res[0].samples[0].finish_reason == "stop"
    bodies = sorted(srv.requests, key=lambda r: r["messages"][-1]["content"])
    first = bodies[0]
    assert first["model"] == "judge-1" and first["n"] == 2 and first["max_tokens"] == 7
    assert first["stop"] == ["\n\n"] and first["seed"] == 5 and first["reasoning_effort"] == "low"
    assert first["messages"] == [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hello"}]
    assert "stop" not in bodies[1] and "seed" not in bodies[1]
    assert bodies[1]["messages"][0] == {"role": "system", "content": "S"}  # own system turn kept, not doubled
    assert all(h.get("Authorization") == "Bearer sekret" for h in srv.headers)


def test_split_n_derives_distinct_seeds():
    with ChatServer(echo) as srv:
        b = OpenAIChatBackend(srv.url + "/v1", "m", split_n=True, max_tokens_field="max_completion_tokens")
        res = b.generate([GenerationRequest(prompt="p", n=3, seed=1)])
    assert len(srv.requests) == 3 and all(r["n"] == 1 for r in srv.requests)
    assert all("max_completion_tokens" in r and "max_tokens" not in r for r in srv.requests)
    seeds = [int(s.text.split("seed=")[1]) for s in res[0].samples]
    assert len(set(seeds)) == 3 and 1 not in seeds


def test_retries_5xx_and_429_then_succeeds():
    with ChatServer(echo, retry_after="0") as srv:
        srv.fail_next = [500, 429]
        b = OpenAIChatBackend(srv.url, "m", max_retries=2, backoff_s=0.0)
        res = b.generate([GenerationRequest(prompt="x")])
    assert res[0].samples[0].text == "x|0|seed=None" and len(srv.requests) == 3


def test_4xx_is_not_retried_and_names_request():
    with ChatServer(echo) as srv:
        srv.fail_next = [400]
        b = OpenAIChatBackend(srv.url, "m", max_retries=3, backoff_s=0.0)
        with pytest.raises(ServerResponseError, match="HTTP 400.*model='m'"):
            b.generate([GenerationRequest(prompt="x")])
    assert len(srv.requests) == 1


def test_retries_exhausted_on_5xx():
    with ChatServer(echo) as srv:
        srv.fail_next = [503, 503]
        b = OpenAIChatBackend(srv.url, "m", max_retries=1, backoff_s=0.0)
        with pytest.raises(ServerResponseError, match="after 2 attempts"):
            b.generate([GenerationRequest(prompt="x")])


def test_unreachable_names_url():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens here now
    b = OpenAIChatBackend(f"http://127.0.0.1:{port}", "m", max_retries=1, backoff_s=0.0, timeout_s=2)
    with pytest.raises(ServerUnreachableError, match=f"127.0.0.1:{port}/v1/chat/completions"):
        b.generate([GenerationRequest(prompt="x")])


def test_missing_api_key_env_is_an_error(monkeypatch):
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(ValueError, match="NO_SUCH_KEY_VAR"):
        OpenAIChatBackend("http://127.0.0.1:1", "m", api_key_env="NO_SUCH_KEY_VAR")


def test_score_labels_from_top_logprobs():
    top = [{"token": " A", "logprob": math.log(0.6)}, {"token": "B", "logprob": math.log(0.2)},
           {"token": "C", "logprob": math.log(0.2)}]
    with ChatServer(echo, logprobs=lambda body: top) as srv:
        b = OpenAIChatBackend(srv.url, "m")
        probs = b.score_labels(["which?"], ["A", "B"])
        assert srv.requests[0]["max_tokens"] == 1 and srv.requests[0]["logprobs"] is True
        assert probs[0]["A"] == pytest.approx(0.75) and probs[0]["B"] == pytest.approx(0.25)
        with pytest.raises(ServerResponseError, match="none of the labels"):
            b.score_labels(["which?"], ["X", "Y"])


def test_malformed_reply():
    with ChatServer(lambda body, k: None) as srv:  # content null -> ""
        b = OpenAIChatBackend(srv.url, "m")
        assert b.generate([GenerationRequest(prompt="x")])[0].samples[0].text == ""
    with ChatServer(lambda body, k: 12) as srv:
        b = OpenAIChatBackend(srv.url, "m")
        with pytest.raises(ServerResponseError, match="not a string"):
            b.generate([GenerationRequest(prompt="x")])
