"""VLLMServerBackend against the loopback reference server: protocol tests and faults.

The reference server generates with ``HFBackend`` on the same weights, so the tests that compare its
replies with HFBackend's check the *protocol* (rendering, token ids, log-prob transport, request grouping),
not agreement between vLLM and HF: that needs a real vLLM (``launch/gpu_check.sh``)."""

from __future__ import annotations

import math

import pytest

from chat_server import unused_port
from vllm_helpers import reference_server
from selectrust.generation.backends.base import GenerationRequest
from selectrust.generation.backends.completions_wire import parse_token_id
from selectrust.generation.backends.vllm_server import ServerResponseError, ServerUnreachableError, VLLMServerBackend


@pytest.fixture(scope="module")
def server(tiny_model_dir, tiny_tokenizer):
    srv = reference_server(tiny_model_dir, tiny_tokenizer)
    yield srv
    srv.shutdown()


@pytest.fixture()
def backend(server, tiny_tokenizer):
    server.faults.__init__()  # no fault leaks between tests
    return VLLMServerBackend(server.url, "tiny", tiny_tokenizer, timeout_s=30, max_retries=2, backoff_s=0.01,
                             server_kind="vllm")  # no /v1/models detection call: fault counts stay exact


@pytest.fixture(scope="module")
def hf(tiny_model_dir, tiny_tokenizer):
    from selectrust.generation.backends.hf import HFBackend
    from selectrust.model import load_model

    return HFBackend(load_model(str(tiny_model_dir)), tiny_tokenizer)


REQS = [
    GenerationRequest(messages=[{"role": "user", "content": "What is 2+2?"}], n=3, max_new_tokens=12),
    GenerationRequest(prompt="Once upon a time", n=2, max_new_tokens=9),
    GenerationRequest(messages=[{"role": "system", "content": "Be brief."},
                                {"role": "user", "content": "Name a colour."}], n=1, max_new_tokens=7),
]


def test_protocol_greedy_completions_round_trip_what_the_server_generated(backend, hf, server):
    served_before = server.requests_served
    got = backend.generate(REQS)
    want = hf.generate(REQS)
    # Requests with different n/max_tokens go out as separate HTTP calls; each returns all its samples.
    assert server.requests_served - served_before == 3
    for g, w, r in zip(got, want, REQS):
        assert len(g.samples) == r.n
        assert g.prompt_token_ids == w.prompt_token_ids
        for s in g.samples:  # greedy: every one of the n samples equals HF's greedy sample
            ws = w.samples[0]
            assert s.token_ids == ws.token_ids and s.text == ws.text and s.finish_reason == ws.finish_reason
            assert s.logprobs == pytest.approx(ws.logprobs, abs=1e-5)
            assert all(lp <= 0 for lp in s.logprobs)


def test_sampled_completions_are_seeded_and_have_n_distinct_draws(backend):
    req = GenerationRequest(prompt="abc", n=4, max_new_tokens=10, temperature=1.0, top_p=1.0, seed=7)
    a = backend.generate([req])[0]
    b = backend.generate([req])[0]
    assert [s.token_ids for s in a.samples] == [s.token_ids for s in b.samples]
    assert len({tuple(s.token_ids) for s in a.samples}) > 1  # a random tiny model: 4 draws of 10 tokens differ
    assert all(len(s.token_ids) == len(s.logprobs) for s in a.samples)


def test_stop_strings_and_max_tokens(backend, hf):
    base = GenerationRequest(prompt="Hello", n=1, max_new_tokens=20)
    full = hf.generate([base])[0].samples[0].text
    assert len(full) > 3
    stop = full[2:4]  # a stop string that greedy decoding is guaranteed to produce
    got = backend.generate([GenerationRequest(prompt="Hello", n=1, max_new_tokens=20, stop=[stop])])[0].samples[0]
    assert got.text == full[:full.find(stop)]
    assert got.finish_reason == "stop"
    short = backend.generate([GenerationRequest(prompt="Hello", n=1, max_new_tokens=3)])[0].samples[0]
    assert len(short.token_ids) <= 3


def test_protocol_prompt_logprobs_round_trip_the_trainer_forward(backend, tiny_model_dir, tiny_tokenizer):
    from selectrust.model import load_model
    from trainer.eval_bridge.weight_sync import trainer_prompt_logprobs

    ids = tiny_tokenizer("probe sequence 123", add_special_tokens=False)["input_ids"]
    got = backend.prompt_logprobs(ids)
    assert len(got) == len(ids) - 1
    assert got == pytest.approx(trainer_prompt_logprobs(load_model(str(tiny_model_dir)), ids), abs=1e-5)


def test_protocol_score_labels_round_trip_prompt_logprobs(backend, hf):
    prompts = ["The answer is", [{"role": "user", "content": "Yes or no?"}]]
    labels = [" yes", " no", " maybe"]
    got = backend.score_labels(prompts, labels)
    want = hf.score_labels(prompts, labels)
    for g, w in zip(got, want):
        assert math.isclose(sum(g.values()), 1.0, rel_tol=1e-9)
        for lab in labels:
            assert g[lab] == pytest.approx(w[lab], abs=1e-5)


def test_retries_after_dropped_connection(backend, server):
    server.faults.drop_connections = 2  # two dropped attempts, the third (max_retries=2) succeeds
    before = server.requests_received
    out = backend.generate([GenerationRequest(prompt="hi", n=2, max_new_tokens=4)])
    assert len(out[0].samples) == 2
    assert server.faults.drop_connections == 0 and server.requests_received == before + 3


def test_retries_on_5xx_then_gives_up_naming_the_request(backend, server):
    server.faults.server_errors = 1
    assert len(backend.generate([GenerationRequest(prompt="hi", max_new_tokens=2)])[0].samples) == 1
    server.faults.server_errors = 5
    with pytest.raises(ServerResponseError, match=r"HTTP 503.*/v1/completions.*after 3 attempts"):
        backend.generate([GenerationRequest(prompt="hi", max_new_tokens=2)])


def test_too_many_dropped_connections_is_an_unreachable_error(backend, server):
    server.faults.drop_connections = 3
    with pytest.raises(ServerUnreachableError, match=server.url):
        backend.generate([GenerationRequest(prompt="hi", max_new_tokens=2)])


def test_timeouts_are_retried_then_reported(server, tiny_tokenizer):
    server.faults.__init__()
    b = VLLMServerBackend(server.url, "tiny", tiny_tokenizer, timeout_s=0.3, max_retries=1, backoff_s=0.01,
                          server_kind="vllm")
    server.faults.delay_s, server.faults.slow_requests = 1.0, 1  # first attempt times out, the retry answers
    assert len(b.generate([GenerationRequest(prompt="hi", max_new_tokens=2)])[0].samples) == 1
    server.faults.slow_requests = 2
    with pytest.raises(ServerUnreachableError, match=r"(?i)timed out.*after 2 attempts"):
        b.generate([GenerationRequest(prompt="hi", max_new_tokens=2)])


def test_unreachable_server_error_names_the_url(tiny_tokenizer):
    port = unused_port()  # a port nobody listens on
    url = f"http://127.0.0.1:{port}"
    b = VLLMServerBackend(url, "tiny", tiny_tokenizer, timeout_s=2, max_retries=1, backoff_s=0.01,
                          error_context=lambda: "engine died: CUDA out of memory")
    assert b.health() is False
    with pytest.raises(ServerUnreachableError) as e:
        b.generate([GenerationRequest(prompt="hi")])
    msg = str(e.value)
    assert url in msg and "after 2 attempts" in msg and "engine died: CUDA out of memory" in msg


def test_malformed_json_names_the_request(backend, server):
    server.faults.malformed_json = 1
    with pytest.raises(ServerResponseError, match=r"malformed JSON .*POST /v1/completions \(model='tiny', 1 prompt"):
        backend.generate([GenerationRequest(prompt="a distinctive prompt", n=2, max_new_tokens=3)])


def test_fewer_samples_than_asked_names_the_request(backend, server):
    server.faults.fewer_samples = 1
    with pytest.raises(ServerResponseError, match=r"asked for 6 samples \(2 prompts x n=3\), server returned 5") as e:
        backend.generate([GenerationRequest(prompt="first prompt", n=3, max_new_tokens=3),
                          GenerationRequest(prompt="second", n=3, max_new_tokens=3)])
    assert "'first prompt'" in str(e.value)


def test_unknown_model_is_a_4xx_error_not_a_retry(backend, server):
    before = server.requests_received
    with pytest.raises(ServerResponseError, match=r"^The model .no-such-adapter. does not exist.*HTTP 404"):
        backend.generate([GenerationRequest(prompt="x", adapter="no-such-adapter")])
    assert server.requests_received == before + 1  # a client error is not retried


def test_parse_token_id():
    assert parse_token_id("token_id:17", "w") == 17
    with pytest.raises(ValueError, match="token_id"):
        parse_token_id("hello", "w")


def test_reference_server_refuses_non_loopback(tiny_model_dir, tiny_tokenizer):
    from selectrust.generation.backends.reference_server import ReferenceServer

    with pytest.raises(ValueError, match="loopback"):
        ReferenceServer(object(), tiny_tokenizer, host="0.0.0.0")


def test_a_late_request_cannot_consume_a_fault_set_after_it_arrived(backend, server, tiny_tokenizer):
    """The flaky-test scenario: a request abandoned by its client (timed out) is still being served when
    the next test sets a fault; it must not take that fault (faults are claimed when a request arrives)."""
    import time

    impatient = VLLMServerBackend(server.url, "tiny", tiny_tokenizer, timeout_s=0.2, max_retries=0, backoff_s=0.01,
                                  server_kind="vllm")
    server.faults.delay_s, server.faults.slow_requests = 1.0, 1
    with pytest.raises(ServerUnreachableError):
        impatient.generate([GenerationRequest(prompt="late", max_new_tokens=2)])
    server.faults.malformed_json = 1  # set while the abandoned request is still in its handler
    time.sleep(1.5)  # ... which now finishes
    assert server.faults.malformed_json == 1
    with pytest.raises(ServerResponseError, match="malformed JSON"):
        backend.generate([GenerationRequest(prompt="a distinctive prompt", max_new_tokens=2)])


# -- issue 35: the server's own error, timeouts sized per call and split, adapters the server cannot serve ----------
@pytest.fixture()
def recorded(server):
    """The prompt lists of the /v1/completions calls the server receives (restored afterwards)."""
    server.faults.__init__()
    inner, seen = server._completions, []

    def recording(body):
        seen.append(body["prompt"])
        return inner(body)

    server._completions = recording
    yield seen
    server._completions = inner


def _dying_engine(server):
    """The next /v1/completions gets vLLM's answer when its engine dies (HTTP 500), and nothing answers after it."""
    from selectrust.generation.backends.reference_server import _HTTPError

    inner = server._completions

    def dying(body):
        server._completions = inner
        server.faults.drop_connections = 10
        raise _HTTPError(500, "EngineCore encountered an issue. See stack trace (above) for the root cause.")

    server._completions = dying


def test_a_server_that_answers_an_error_then_dies_is_reported_with_its_answer(server, tiny_tokenizer):
    server.faults.__init__()
    b = VLLMServerBackend(server.url, "tiny", tiny_tokenizer, timeout_s=10, max_retries=2, backoff_s=0.01,
                          server_kind="vllm")
    _dying_engine(server)
    with pytest.raises(ServerUnreachableError) as e:
        b.generate([GenerationRequest(prompt="hi", max_new_tokens=2)])
    assert "earlier attempt with an error: EngineCore encountered an issue" in str(e.value) and "HTTP 500" in str(e.value)
    # server kind still unknown (auto): the probe's failure used to turn into "/v1/models is unreachable"
    server.faults.__init__()
    auto = VLLMServerBackend(server.url, "tiny", tiny_tokenizer, timeout_s=10, max_retries=0, backoff_s=0.01)
    _dying_engine(server)
    with pytest.raises(ServerResponseError, match=r"^EngineCore encountered an issue.*HTTP 500"):
        auto.prompt_logprobs([1, 2, 3, 4])
    server.faults.__init__()


def test_a_timed_out_call_is_split_not_resubmitted_whole(server, recorded, tiny_tokenizer):
    import time

    reqs = [GenerationRequest(prompt=f"prompt {i}", max_new_tokens=3) for i in range(4)]
    b = VLLMServerBackend(server.url, "tiny", tiny_tokenizer, timeout_s=0.5, timeout_per_token_s=0.0, max_retries=1,
                          backoff_s=0.01, server_kind="vllm", max_prompts_per_call=4, concurrency=1)
    want = [r.samples[0].token_ids for r in b.generate(reqs)]
    recorded.clear()
    server.faults.delay_s, server.faults.slow_requests = 1.0, 1  # the 4-prompt call runs out of time
    got = [r.samples[0].token_ids for r in b.generate(reqs)]
    assert got == want
    time.sleep(1.0)  # the abandoned call reaches the handler (and the record) after its delay
    assert sorted(len(p) for p in recorded) == [2, 2, 4]  # not [4, 4]: the halves went instead
    # prompt log-probs calls split the same way
    recorded.clear()
    seqs = [[1, 2, 3, 4], [5, 6, 7], [8, 9, 10], [11, 12, 13]]
    want = b.prompt_logprobs_batch(seqs)
    server.faults.delay_s, server.faults.slow_requests = 1.0, 1
    assert b.prompt_logprobs_batch(seqs) == want
    time.sleep(1.0)
    assert sorted(len(p) for p in recorded) == [2, 2, 4, 4]


def test_a_call_gets_time_for_the_tokens_it_asks_for(server, recorded, tiny_tokenizer):
    """timeout_s alone (0.5 s) is too short for a slow server (1 s); a call asking for enough tokens gets the time."""
    import time

    b = VLLMServerBackend(server.url, "tiny", tiny_tokenizer, timeout_s=0.5, timeout_per_token_s=0.02, max_retries=1,
                          backoff_s=0.01, server_kind="vllm")
    short, long = (GenerationRequest(prompt="hi", max_new_tokens=k) for k in (1, 40))
    assert b.call_timeout_s(3 + 40) > 1.0 > b.call_timeout_s(3 + 1)
    server.faults.delay_s, server.faults.slow_requests = 1.0, 1
    b.generate([short])
    time.sleep(1.0)
    assert len(recorded) == 2  # timed out once, retried
    recorded.clear()
    server.faults.slow_requests = 1
    b.generate([long])
    assert len(recorded) == 1  # answered within its own, longer limit
    assert b.call_timeout_s(100, in_flight=4) == pytest.approx(0.5 + 0.02 * 100 * 4)  # calls sharing the server


def test_an_adapter_the_server_cannot_serve_whole_is_refused_before_it_is_loaded(server, tiny_model_dir,
                                                                                 tiny_tokenizer, tmp_path):
    from peft import LoraConfig, get_peft_model

    from vllm_helpers import make_lora_policy
    from selectrust.generation.backends.vllm_server import AdapterLoadError, read_server_settings
    from selectrust.model import load_model
    from trainer.eval_bridge.weight_sync import save_adapter_atomically

    server.faults.__init__()
    log = tmp_path / "vllm_server.log"
    (tmp_path / "vllm_server.json").write_text('{"max_lora_rank": 8, "lora_target_modules": ["q_proj", "v_proj"]}')
    settings = read_server_settings(str(log))  # what launch/vllm_launcher.py wrote beside its log
    assert read_server_settings(str(tmp_path / "other.log")) is None
    b = VLLMServerBackend(server.url, "tiny", tiny_tokenizer, timeout_s=30, max_retries=0, server_kind="vllm",
                          server_settings=settings)
    ok, _ = save_adapter_atomically(make_lora_policy(tiny_model_dir, seed=1), tmp_path / "a", "s1")  # r4 on q, v
    b.load_adapter(ok, "s1")
    served = b.current_adapter
    mlp = get_peft_model(load_model(str(tiny_model_dir)), LoraConfig(r=4, target_modules=["q_proj", "up_proj"]))
    wide = get_peft_model(load_model(str(tiny_model_dir)), LoraConfig(r=16, target_modules=["q_proj"]))
    for policy, why in ((mlp, r"LoRA on \['up_proj'\].*silently ignore"), (wide, "rank 16, above .* 8")):
        path, _ = save_adapter_atomically(policy, tmp_path / "b", why[:4])
        before = server.requests_received
        with pytest.raises(AdapterLoadError, match=why):
            b.load_adapter(path, "s2")
        assert server.requests_received == before and b.current_adapter == served  # nothing was sent


def test_the_generation_group_sizes_time_by_tokens_reads_the_launchers_settings_and_checks_its_keys(tmp_path):
    from omegaconf import OmegaConf

    from selectrust.generation.backends import BuildContext, get_backend
    from recipe_utils import compose
    from selectrust.core.errors import ConfigError
    from trainer.config import validate_common

    log = tmp_path / "vllm_server.log"
    (tmp_path / "vllm_server.json").write_text('{"max_lora_rank": 8, "lora_target_modules": ["q_proj"]}')
    cfg = compose("grpo", ["generation=vllm_server", f"generation.server_log={log}", "generation.timeout_per_token_s=0.5"])
    assert cfg.generation.probe_threshold is None  # by the server's precision, measured at the first sync
    validate_common(cfg)
    b = get_backend("vllm_server").build(cfg.generation, BuildContext(model_path="m"))
    assert b.timeout_per_token_s == 0.5 and b.server_settings == {"max_lora_rank": 8, "lora_target_modules": ["q_proj"]}
    for key, value, match in (("timeout_per_token_s", -1.0, r"timeout_per_token_s must be >= 0"),
                              ("probe_threshold", 0.0, r"probe_threshold must be > 0")):
        bad = OmegaConf.create(OmegaConf.to_container(cfg))
        bad.generation = OmegaConf.merge(cfg.generation, {key: value})
        with pytest.raises(ConfigError, match=rf"^generation\.{match}"):
            validate_common(bad)
