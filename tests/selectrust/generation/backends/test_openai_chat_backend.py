"""OpenAIChatBackend against a loopback chat-completions server (no external network)."""

import math

import pytest

from selectrust.generation.backends import GenerationRequest
from selectrust.generation.backends.openai_chat import (OpenAIChatBackend, ServerResponseError, ServerUnreachableError,
                                             chat_url)
from tests.chat_server import ChatServer, unused_port


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
    port = unused_port()  # nothing listens here
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


# -- bounds of one request: a deadline over all attempts, a size bound, choice indexes (issue 25, item 4) --
def test_a_server_that_drips_its_reply_cannot_outlive_the_deadline():
    """One byte every 0.25 s: each socket read succeeds, so only a whole-request deadline stops it."""
    with ChatServer(lambda body, k: "x" * 200, drip_s=0.25) as srv:
        b = OpenAIChatBackend(srv.url, "m", timeout_s=2, max_retries=3, backoff_s=0.0)
        with pytest.raises(ServerUnreachableError, match="deadline was reached") as e:
            b.generate([GenerationRequest(prompt="x")])
        assert e.value.timed_out
        # the deadline covers the retries too: the attempt that hit it was the last one
        assert e.value.attempts == len(srv.requests) == 1
        assert srv.drip_stopped.wait(30)  # the client closed the connection; the server saw it


def test_retries_stop_at_the_deadline_not_at_max_retries():
    with ChatServer(echo, retry_after="0.6") as srv:
        srv.fail_next = [503] * 50
        b = OpenAIChatBackend(srv.url, "m", timeout_s=1.5, max_retries=20, backoff_s=0.0)
        with pytest.raises(ServerResponseError, match=r"HTTP 503.*deadline was reached") as e:
            b.generate([GenerationRequest(prompt="x")])
    assert e.value.timed_out and e.value.attempts == len(srv.requests) < 21


def test_a_reply_larger_than_the_bound_is_refused_not_read_whole():
    with ChatServer(echo, pad_bytes=50 * 2 ** 20) as srv:  # a 50 MB body
        b = OpenAIChatBackend(srv.url, "m", max_retries=2, backoff_s=0.0)  # default bound: 16 MiB
        with pytest.raises(ServerResponseError, match=r"larger than the 16777216-byte bound \(Content-Length 524") as e:
            b.generate([GenerationRequest(prompt="x")])
        assert e.value.attempts == 1 and not e.value.timed_out and len(srv.requests) == 1  # refused, not retried
        srv.pad_bytes = 2000  # a small reply still goes through a small bound
        assert OpenAIChatBackend(srv.url, "m", max_response_bytes=4000).generate(
            [GenerationRequest(prompt="x")])[0].samples[0].text == "x|0|seed=None"


def test_a_body_without_content_length_is_cut_at_the_bound():
    from selectrust.generation.backends.transport import BodyTooLarge, _read_bounded

    class Chunked:  # what http.client gives for a chunked reply: no Content-Length, read1 in pieces
        def __init__(self):
            self.sent = 0

        def getheader(self, name):
            return None

        def read1(self, n):
            self.sent += 1000
            return b"x" * 1000

    r = Chunked()
    with pytest.raises(BodyTooLarge, match="more than 4500 bytes"):
        _read_bounded(r, 4500)
    assert r.sent == 5000  # stopped at the first chunk past the bound


@pytest.mark.parametrize("shape, match", [
    (lambda ch: [dict(c, index=0) for c in ch], r"indexes \[0, 0\] do not cover 0..1"),
    (lambda ch: [dict(c, index=c["index"] + 1) for c in ch], r"indexes \[1, 2\] do not cover 0..1"),
    (lambda ch: ch[:1], r"asked for n=2 choices, got 1; this server ignores n: set split_n=true"),
])
def test_choice_indexes_must_cover_0_to_n_minus_1_once(shape, match):
    with ChatServer(echo, shape_choices=shape) as srv:
        b = OpenAIChatBackend(srv.url, "m", max_retries=0)
        with pytest.raises(ServerResponseError, match=match):
            b.generate([GenerationRequest(prompt="x", n=2)])


def test_choices_in_any_order_are_put_in_index_order():
    with ChatServer(echo, shape_choices=lambda ch: ch[::-1]) as srv:
        res = OpenAIChatBackend(srv.url, "m").generate([GenerationRequest(prompt="x", n=3)])
    assert [s.text for s in res[0].samples] == ["x|0|seed=None", "x|1|seed=None", "x|2|seed=None"]


def test_validation_error_is_not_retried_and_shows_every_field(caplog):
    """A FastAPI-style validation error (here HTTP 500, as llama.cpp sends it): the server's own message
    first, every item shown with a bounded input, no retry, and no 'retrying' in the log."""
    detail = [{"type": "string_type", "loc": ["body", "messages", i], "msg": "Input should be a valid string",
               "input": "y" * 5000} for i in range(21)]
    detail.append({"type": "greater_than_equal", "loc": ["body", "top_k"], "msg": "Input should be >= 0",
                   "input": -1})

    with ChatServer(echo) as srv:
        srv.fail_next = [500]
        srv.error_body = {"detail": detail}
        b = OpenAIChatBackend(srv.url, "m", max_retries=3, backoff_s=0.0)
        with pytest.raises(ServerResponseError) as e:
            b.generate([GenerationRequest(prompt="x")])
    msg = str(e.value)
    assert msg.startswith("22 validation error(s): body.messages.0: Input should be a valid string")
    assert "body.top_k: Input should be >= 0 (input -1)" in msg and "not retried" in msg
    assert e.value.validation and e.value.attempts == 1 and len(srv.requests) == 1
    assert "retrying" not in caplog.text


def test_the_last_attempt_does_not_say_retrying(caplog):
    with ChatServer(echo) as srv:
        srv.fail_next = [503, 503]
        b = OpenAIChatBackend(srv.url, "m", max_retries=1, backoff_s=0.0)
        with pytest.raises(ServerResponseError, match="after 2 attempts"):
            b.generate([GenerationRequest(prompt="x")])
    lines = [r.getMessage() for r in caplog.records if "HTTP 503" in r.getMessage()]
    assert len(lines) == 2 and "retrying" in lines[0] and "retrying" not in lines[1] and "giving up" in lines[1]


def test_multi_token_labels_are_refused_before_any_call():
    from selectrust.generation.backends.openai_chat import ServerCapabilityError

    with ChatServer(echo, logprobs=lambda body: []) as srv:
        b = OpenAIChatBackend(srv.url, "m")
        with pytest.raises(ServerCapabilityError, match="not single first tokens.*eval.med.label_probs=false"):
            b.score_labels(["q"], ["ANSWER: A", "ANSWER: B"])
    assert srv.requests == []


def test_a_connection_closed_mid_body_is_a_transport_error_and_is_retried():
    with ChatServer(echo) as srv:
        srv.cut_next = 1
        b = OpenAIChatBackend(srv.url, "m", max_retries=1, backoff_s=0.0)
        res = b.generate([GenerationRequest(prompt="x")])
        assert res[0].samples[0].text == "x|0|seed=None" and len(srv.requests) == 2
        srv.cut_next = 2
        with pytest.raises(ServerUnreachableError, match="IncompleteRead") as e:
            b.generate([GenerationRequest(prompt="y")])
    assert e.value.attempts == 2 and "malformed JSON" not in str(e.value)
