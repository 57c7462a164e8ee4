"""launch/vllm_launcher.py: start the reference server as a subprocess, use it, see it die, tear it down."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from selectrust.generation.backends.base import GenerationRequest
from selectrust.generation.backends.vllm_server import ServerUnreachableError
from selectrust.core.io import root_error_line
from eval_hooks.cli_contract import INPUT_EXIT, classify
from launch.vllm_launcher import (ServerDiedError, ServerInputError, ServerStartError, VLLMServer, cpu_server_env,
                                  max_lora_rank_for, model_linear_modules, server_lora_targets, tail_file)


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_vllm_command_line_on_a_gpu():
    s = VLLMServer("Qwen/Qwen3-4B", port=8123, venv_python="/opt/vllm/bin/python", log_path="x.log", device="gpu",
                   extra_args=["--enforce-eager"], lora_rank=64, lora_target_modules=["q_proj", "v_proj"],
                   dtype="bfloat16")
    cmd = s.command()
    assert cmd[:3] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(cmd)
    for part in ("--model Qwen/Qwen3-4B", "--served-model-name Qwen/Qwen3-4B", "--host 127.0.0.1", "--port 8123",
                 "--enable-lora", "--max-lora-rank 64", "--logprobs-mode raw_logprobs", "--dtype bfloat16",
                 "--lora-target-modules q_proj v_proj --dtype", "--enforce-eager"):
        assert part in joined
    assert "--max-model-len" not in joined and "chunked" not in joined  # vLLM's own defaults on a GPU
    assert "VLLM_CPU_KVCACHE_SPACE" not in s.server_env()
    with pytest.raises(ValueError, match="loopback"):
        VLLMServer("m", host="0.0.0.0")


def test_cpu_command_line_follows_the_policy_lora_and_never_puts_lora_on_the_lm_head(tiny_model_dir, monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "1")  # the user's setting wins
    s = VLLMServer(str(tiny_model_dir), venv_python="/opt/v/bin/python", device="cpu", lora_rank=4,
                   lora_target_modules=["q_proj", "v_proj", "lm_head"], served_model_name="tiny")
    cmd = s.command()
    targets = cmd[cmd.index("--lora-target-modules") + 1:cmd.index("--dtype")]
    assert targets == ["q_proj", "v_proj"]
    assert cmd[cmd.index("--max-lora-rank") + 1] == "8"  # the smallest rank vLLM accepts that holds rank 4
    assert cmd[cmd.index("--dtype") + 1] == "float32" and cmd[cmd.index("--max-model-len") + 1] == "2048"
    # whole prefills only (a split prefill of a seeded request kills vllm-cpu 0.32.0's engine)
    assert "--no-enable-chunked-prefill" in cmd and cmd[cmd.index("--max-num-batched-tokens") + 1] == "2048"
    env = s.server_env()
    assert 1 <= int(env["VLLM_CPU_KVCACHE_SPACE"]) <= 4 and "VLLM_CPU_NUM_OF_RESERVED_CPU" not in env
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    st = s.settings()
    assert (st["device"], st["dtype"], st["max_lora_rank"], st["lora_target_modules"]) == ("cpu", "float32", 8,
                                                                                           ["q_proj", "v_proj"])
    # all-linear (peft) and no targets at all: the model's own linear layers, read from the safetensors header
    linear = model_linear_modules(tiny_model_dir)
    assert {"q_proj", "k_proj", "v_proj", "o_proj"} <= set(linear) and "lm_head" not in linear
    assert server_lora_targets(["all-linear"], tiny_model_dir) == linear == server_lora_targets(None, tiny_model_dir)
    with pytest.raises(ValueError, match="nothing left"):
        server_lora_targets(["lm_head"], tiny_model_dir)
    with pytest.raises(ValueError, match="not a local model directory"):
        VLLMServer("org/remote-model", venv_python="x", device="cpu").command()
    assert [max_lora_rank_for(r) for r in (1, 2, 8, 9, 16, 64, 65)] == [1, 8, 8, 16, 16, 64, 128]
    with pytest.raises(ValueError, match="largest"):
        max_lora_rank_for(513)


def test_the_client_of_a_vllm_server_knows_its_lora_settings(tiny_model_dir):
    s = VLLMServer(str(tiny_model_dir), venv_python="/opt/v/bin/python", device="cpu", lora_rank=4,
                   lora_target_modules=["q_proj", "v_proj"])
    settings = s.backend(None).server_settings  # adapters it cannot serve whole are refused before loading
    assert settings["lora_target_modules"] == ["q_proj", "v_proj"] and settings["max_lora_rank"] == 8
    assert VLLMServer(str(tiny_model_dir), kind="reference").backend(None).server_settings == {}


def test_cpu_env_defaults(monkeypatch):
    for k in ("VLLM_CPU_KVCACHE_SPACE", "VLLM_CPU_NUM_OF_RESERVED_CPU"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 2)
    assert cpu_server_env(kv_cache_gib=3) == {"VLLM_CPU_KVCACHE_SPACE": "3", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"}
    monkeypatch.setattr(os, "cpu_count", lambda: 32)
    assert cpu_server_env(kv_cache_gib=3) == {"VLLM_CPU_KVCACHE_SPACE": "3"}  # vLLM's own choice on a big host
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "7")
    assert "VLLM_CPU_KVCACHE_SPACE" not in cpu_server_env(kv_cache_gib=3)


# What vllm-cpu 0.32.0 wrote when a seeded request's prefill was split over two steps (lines of its log, abridged).
ENGINE_CRASH_LOG = """\
(APIServer pid=19670) INFO 12-02 20:35:36 [model.py:2152] Using max model len 2048
(Worker pid=20196) ERROR 12-02 20:47:45 [multiproc_executor.py:1063]     gen.set_offset(gen.get_offset() - 4)
(Worker pid=20196) ERROR 12-02 20:47:45 [multiproc_executor.py:1063] RuntimeError: CPU Generator does not use offset
(EngineCore pid=20017) ERROR 12-02 20:47:45 [core.py:1512] EngineCore encountered a fatal error.
(EngineCore pid=20017) ERROR 12-02 20:47:45 [core.py:1512] RuntimeError: Worker failed with error 'CPU Generator does \
not use offset', please check the stack trace above for the root cause
(APIServer pid=19670) ERROR 12-02 20:47:45 [async_llm.py:906] vllm.v1.engine.exceptions.EngineDeadError: EngineCore \
encountered an issue. See stack trace (above) for the root cause.
INFO:     127.0.0.1:38490 - "POST /v1/completions HTTP/1.1" 500 Internal Server Error
"""


def test_root_error_line_is_the_engines_own_error_not_the_wrapper():
    assert root_error_line(ENGINE_CRASH_LOG) == "RuntimeError: CPU Generator does not use offset"
    only_wrapper = "\n".join(l for l in ENGINE_CRASH_LOG.splitlines() if "RuntimeError" not in l)
    assert root_error_line(only_wrapper).startswith("vllm.v1.engine.exceptions.EngineDeadError: EngineCore")
    assert root_error_line("INFO all good\nnothing failed here") is None
    start_failure = ("ERROR [core.py:1] ValueError: Available memory on node 0 (10.1/23.4 GiB) on startup is less than "
                     "desired CPU memory utilization\nRuntimeError: Engine core initialization failed. See root cause "
                     "above. Failed core proc(s): {}")
    assert root_error_line(start_failure).startswith("ValueError: Available memory on node 0")


def test_launcher_starts_reference_server_serves_and_reports_death(tmp_path, tiny_model_dir, tiny_tokenizer):
    log = tmp_path / "run" / "vllm_server.log"
    with VLLMServer(str(tiny_model_dir), kind="reference", served_model_name="tiny", log_path=log,
                    startup_timeout_s=120) as server:
        assert server.is_alive() and _port_open(server.port)
        backend = server.backend(tiny_tokenizer, timeout_s=30, max_retries=1, backoff_s=0.01)
        out = backend.generate([GenerationRequest(prompt="hello", n=2, max_new_tokens=4)])
        assert len(out[0].samples) == 2
        assert "listening on" in server.last_log_lines(5)

        os.kill(server.proc.pid, signal.SIGKILL)  # the server crashes mid-run
        server.proc.wait(timeout=30)
        with pytest.raises(ServerUnreachableError) as e:
            backend.generate([GenerationRequest(prompt="hello", max_new_tokens=4)])
        msg = str(e.value)
        assert server.url in msg and "exited with code -9" in msg and "listening on" in msg  # log tail included
        with pytest.raises(ServerDiedError, match="(?s)exited with code -9.*listening on"):
            server.check_alive()
    assert not _port_open(server.port)
    assert "reference_server" in tail_file(log)


def test_a_running_server_is_attached_from_its_settings_used_and_left_running(tmp_path, tiny_model_dir,
                                                                              tiny_tokenizer):
    log = tmp_path / "run" / "vllm_server.log"
    with VLLMServer(str(tiny_model_dir), kind="reference", served_model_name="tiny", log_path=log,
                    lora_target_modules=["q_proj"], startup_timeout_s=120) as owner:
        other = VLLMServer.attach(owner.settings_path, startup_timeout_s=30)
        assert other.attached and not owner.attached and other.url == owner.url
        assert other.settings() == json.loads(owner.settings_path.read_text()) == owner.settings()
        with other:  # waits until healthy, starts nothing
            assert other.proc is None and "started elsewhere" in other.describe()
            out = other.backend(tiny_tokenizer, timeout_s=30).generate([GenerationRequest(prompt="hi", max_new_tokens=2)])
            assert len(out[0].samples) == 1
        assert owner.is_alive() and _port_open(owner.port)  # the attached side's exit left it running
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"url": owner.url}))
    with pytest.raises(ValueError, match=r"bad\.json: not the settings of a server started by launch/vllm_launcher.py"):
        VLLMServer.attach(bad)
    with pytest.raises(ServerStartError, match="not healthy after 1s"):  # its owner stopped it
        VLLMServer.attach(owner.settings_path, startup_timeout_s=1).start()


def _fake_server(tmp_path, *lines: str, code: int) -> str:
    """A "python" that prints ``lines`` and exits with ``code`` whatever it is asked to run."""
    exe = tmp_path / "fake_python"
    exe.write_text("#!/bin/sh\n" + "".join(f"echo '{line}'\n" for line in lines) + f"exit {code}\n")
    exe.chmod(0o755)
    return str(exe)


def test_launcher_start_failure_shows_last_log_lines(tmp_path):
    log = tmp_path / "server.log"
    python = _fake_server(tmp_path, "Traceback (most recent call last):", "RuntimeError: the engine broke", code=1)
    with pytest.raises(ServerStartError, match=r"(?s)exited with code 1 before it became healthy at http\S+: "
                                               r"RuntimeError: the engine broke\. Last log lines.*Traceback") as e:
        VLLMServer("tiny", kind="reference", venv_python=python, log_path=log, startup_timeout_s=120).start()
    assert not isinstance(e.value, ServerInputError)  # a failure, not a bad input: exit 1 on the command line
    assert json.loads(log.with_suffix(".json").read_text())["base_model"] == "tiny"


@pytest.mark.parametrize("bad", ["missing", "empty"])
def test_a_reference_server_refusing_its_model_is_its_one_line_not_a_timeout(tmp_path, bad):
    model = tmp_path / bad
    if bad == "empty":
        model.mkdir()
    log = tmp_path / "server.log"
    t0 = time.monotonic()
    with pytest.raises(ServerInputError) as e:  # the real server, a bad --model: it exits 2 with its one line
        VLLMServer(str(model), kind="reference", log_path=log, startup_timeout_s=120).start()
    assert time.monotonic() - t0 < 60  # seen as it exited, long before the startup timeout
    msg = str(e.value)
    assert len(msg.splitlines()) == 1 and str(model) in msg
    assert msg.startswith("reference server did not start: --model")
    assert "Traceback" not in msg and "Traceback" not in log.read_text()
    assert classify(e.value) == (INPUT_EXIT, f"error: {msg}")  # a DataError: one line, exit 2 under the contract


def _launcher(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "launch.vllm_launcher", *args], capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("kind", ["reference", "vllm"])
def test_launcher_command_line_refuses_a_bad_model_in_one_line_before_any_server(tmp_path, kind):
    log = tmp_path / "server.log"
    done = _launcher("--kind", kind, "--model", str(tmp_path / "no-such-model"), "--log-path", str(log))
    assert done.returncode == INPUT_EXIT and "Traceback" not in done.stderr + done.stdout
    assert done.stderr.splitlines() == [f"error: --model: model directory {str(tmp_path / 'no-such-model')!r} does "
                                        f"not exist"]
    assert not log.exists()  # no server was started


def test_launcher_command_line_relays_the_servers_refusal_exit_2(tmp_path):
    python = _fake_server(tmp_path, "error: --model: the server says no", code=2)
    done = _launcher("--kind", "reference", "--model", "tiny", "--venv-python", python,
                     "--log-path", str(tmp_path / "server.log"))
    assert done.returncode == INPUT_EXIT and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [f"error: reference server did not start: --model: the server says no "
                                        f"(log {tmp_path / 'server.log'})"]


def test_tail_file(tmp_path):
    p = tmp_path / "f.log"
    p.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail_file(p, 3) == "line 97\nline 98\nline 99"
    assert tail_file(tmp_path / "missing") == ""


@pytest.mark.parametrize("case, words", [
    ("missing", "no adapter_config.json"),
    ("not_json", "not JSON"),
    ("r_text", "field 'r'"),
    ("r_zero", "field 'r'"),
    ("targets_number", "field 'target_modules'"),
])
def test_like_adapter_that_does_not_fit_is_one_line_exit_2(tmp_path, case, words):
    """Issue 59 BAD 9: ``--like-adapter /nosuch`` (or an adapter config with ``"r": "x"``) was a traceback, exit 1."""
    adapter = tmp_path / "adapter"
    if case != "missing":
        adapter.mkdir()
        config = {"not_json": "{r: 8", "r_text": json.dumps({"r": "x", "target_modules": ["q_proj"]}),
                  "r_zero": json.dumps({"r": 0, "target_modules": ["q_proj"]}),
                  "targets_number": json.dumps({"r": 8, "target_modules": 3})}[case]
        (adapter / "adapter_config.json").write_text(config)
    log = tmp_path / "server.log"
    done = _launcher("--kind", "reference", "--model", "tiny", "--like-adapter", str(adapter), "--log-path", str(log))
    assert done.returncode == INPUT_EXIT and "Traceback" not in done.stderr + done.stdout, done.stderr[-2000:]
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--like-adapter" in lines[0], lines
    assert words in lines[0] and str(adapter) in lines[0], lines[0]
    assert not log.exists()  # no server was started
