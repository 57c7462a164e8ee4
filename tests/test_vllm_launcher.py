"""launch/vllm_server.py: start the reference server as a subprocess, use it, see it die, tear it down."""

from __future__ import annotations

import os
import signal
import socket

import pytest

from eval_hooks.backends.base import GenerationRequest
from eval_hooks.backends.vllm_server import ServerUnreachableError
from launch.vllm_server import ServerDiedError, ServerStartError, VLLMServer, tail_file


def _port_open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def test_vllm_command_line():
    s = VLLMServer("Qwen/Qwen3-4B", port=8123, venv_python="/opt/vllm/bin/python", log_path="x.log",
                   extra_args=["--dtype", "bfloat16"], max_lora_rank=64)
    cmd = s.command()
    assert cmd[:3] == ["/opt/vllm/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    joined = " ".join(cmd)
    for part in ("--model Qwen/Qwen3-4B", "--served-model-name Qwen/Qwen3-4B", "--host 127.0.0.1", "--port 8123",
                 "--enable-lora", "--max-lora-rank 64", "--logprobs-mode raw_logprobs", "--dtype bfloat16"):
        assert part in joined
    with pytest.raises(ValueError, match="loopback"):
        VLLMServer("m", host="0.0.0.0")


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


def test_launcher_start_failure_shows_last_log_lines(tmp_path):
    log = tmp_path / "server.log"
    with pytest.raises(ServerStartError, match=r"(?s)exited with code 1 before it became healthy.*Traceback"):
        VLLMServer(str(tmp_path / "no-such-model"), kind="reference", log_path=log, startup_timeout_s=120).start()


def test_tail_file(tmp_path):
    p = tmp_path / "f.log"
    p.write_text("".join(f"line {i}\n" for i in range(100)))
    assert tail_file(p, 3) == "line 97\nline 98\nline 99"
    assert tail_file(tmp_path / "missing") == ""
