"""Start, watch and stop a vLLM OpenAI-compatible server (or the CPU reference server) for rollouts.

vLLM pins its own torch/transformers, so it runs from its own virtual environment
(``launch/vllm-requirements.txt`` says how to build it) as a separate process; the trainer talks to it
over HTTP through :class:`eval_hooks.backends.vllm_server.VLLMServerBackend`.

API
---
    with VLLMServer("Qwen/Qwen3-4B", port=8000, venv_python="/opt/vllm-venv/bin/python",
                    log_path=run_dir / "vllm_server.log", extra_args=["--dtype", "bfloat16"]) as server:
        backend = server.backend(tokenizer)   # error messages carry the server's last log lines
        ...
        server.check_alive()                   # raises ServerDiedError (with log tail) if it exited

    # CPU tests: the same launcher starts the loopback reference server instead
    VLLMServer("tiny", kind="reference", log_path=...)

Command line (what ``launch/vllm_server.sh`` calls)::

    python -m launch.vllm_server --model Qwen/Qwen3-4B --port 8000 --venv-python /opt/vllm-venv/bin/python \
        --log-path runs/x/vllm_server.log [--kind vllm|reference] [-- extra vLLM args]

The vLLM command is ``<venv_python> -m vllm.entrypoints.openai.api_server --model <base>
--served-model-name <name> --host 127.0.0.1 --port <port> --enable-lora --max-lora-rank <r>
--max-loras <k> --logprobs-mode raw_logprobs --generation-config vllm <extra_args>`` with
``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``. ``raw_logprobs`` makes returned log-probs the policy's own
(temperature 1, before top-p); ``--generation-config vllm`` stops the model's generation_config.json
from changing default sampling parameters. The server's stdout/stderr go to ``log_path`` (in the run
directory); the process runs in its own session and its whole process group is stopped on exit.
"""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from eval_hooks.io import tail_file

REPO_ROOT = Path(__file__).resolve().parents[1]


class ServerStartError(RuntimeError):
    """The server exited or did not become healthy in time. The message holds its last log lines."""


class ServerDiedError(RuntimeError):
    """The server process exited while it was in use. The message holds its last log lines."""


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class VLLMServer:
    """A server subprocess: ``kind="vllm"`` (real vLLM, GPU) or ``kind="reference"`` (CPU tests)."""

    def __init__(self, base_model: str, port: int = 0, venv_python: str | None = None,
                 log_path: str | Path = "vllm_server.log", extra_args: list[str] | tuple[str, ...] = (), *,
                 kind: str = "vllm", served_model_name: str | None = None, max_lora_rank: int = 64,
                 max_loras: int = 2, host: str = "127.0.0.1", startup_timeout_s: float = 900.0,
                 stop_timeout_s: float = 30.0, env: dict | None = None):
        if kind not in ("vllm", "reference"):
            raise ValueError(f"VLLMServer.kind must be 'vllm' or 'reference', got {kind!r}")
        if host not in ("127.0.0.1", "localhost", "::1"):
            raise ValueError(f"VLLMServer binds to loopback only, got host={host!r}")
        self.base_model = base_model
        self.kind = kind
        self.host = host
        self.port = port or free_port(host)
        self.venv_python = venv_python or sys.executable
        self.log_path = Path(log_path)
        self.extra_args = list(extra_args)
        self.served_model_name = served_model_name or base_model
        self.max_lora_rank = max_lora_rank
        self.max_loras = max_loras
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self._log_file = None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def command(self) -> list[str]:
        if self.kind == "reference":
            return [self.venv_python, "-m", "eval_hooks.backends.reference_server", "--model", self.base_model,
                    "--served-model-name", self.served_model_name, "--host", self.host, "--port", str(self.port),
                    *self.extra_args]
        return [self.venv_python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.base_model,
                "--served-model-name", self.served_model_name, "--host", self.host, "--port", str(self.port),
                "--enable-lora", "--max-lora-rank", str(self.max_lora_rank), "--max-loras", str(self.max_loras),
                "--logprobs-mode", "raw_logprobs", "--generation-config", "vllm", *self.extra_args]

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "VLLMServer":
        if self.is_alive():
            raise RuntimeError(f"VLLMServer already running at {self.url}")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = open(self.log_path, "ab", buffering=0)
        cmd = self.command()
        self._log_file.write(f"$ {' '.join(cmd)}\n".encode())
        env = {**os.environ, "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "PYTHONUNBUFFERED": "1", **self.env}
        if self.kind == "reference":  # the reference server imports this repository
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
        self.proc = subprocess.Popen(cmd, stdout=self._log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                     env=env, cwd=str(REPO_ROOT), start_new_session=True)
        atexit.register(self.stop)
        try:
            self.wait_healthy(self.startup_timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def wait_healthy(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            if self.proc.poll() is not None:
                raise ServerStartError(f"{self.kind} server exited with code {self.proc.returncode} before it "
                                       f"became healthy at {self.url}. Last log lines ({self.log_path}):\n"
                                       f"{self.last_log_lines(40)}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise ServerStartError(f"{self.kind} server at {self.url} not healthy after {timeout_s:.0f}s. "
                                       f"Last log lines ({self.log_path}):\n{self.last_log_lines(40)}")
            time.sleep(0.25)

    def is_alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def check_alive(self) -> None:
        """Raise :class:`ServerDiedError` with the log tail if the process has exited."""
        if self.proc is not None and self.proc.poll() is not None:
            raise ServerDiedError(f"{self.kind} server at {self.url} exited with code {self.proc.returncode}. "
                                  f"Last log lines ({self.log_path}):\n{self.last_log_lines(40)}")

    def last_log_lines(self, n: int = 40) -> str:
        return tail_file(self.log_path, n)

    def describe(self) -> str:
        """Status + log tail, used as the backend's ``error_context``."""
        state = "running" if self.is_alive() else \
            f"exited with code {self.proc.returncode}" if self.proc is not None else "not started"
        return f"[{self.kind} server pid {getattr(self.proc, 'pid', None)} {state}; log {self.log_path}]\n" \
               f"{self.last_log_lines(40)}"

    def stop(self) -> None:
        """Stop the server's process group: SIGTERM, then SIGKILL after ``stop_timeout_s``. Idempotent."""
        proc = self.proc
        if proc is not None and proc.poll() is None:
            for sig, wait_s in ((signal.SIGTERM, self.stop_timeout_s), (signal.SIGKILL, 10.0)):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    proc.wait(timeout=wait_s)
                    break
                except subprocess.TimeoutExpired:
                    continue
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        atexit.unregister(self.stop)

    def __enter__(self) -> "VLLMServer":
        return self if self.is_alive() else self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def backend(self, tokenizer=None, **kwargs):
        """A :class:`VLLMServerBackend` for this server whose errors include :meth:`describe`."""
        from eval_hooks.backends.vllm_server import VLLMServerBackend

        kwargs.setdefault("error_context", self.describe)
        return VLLMServerBackend(self.url, self.served_model_name, tokenizer, **kwargs)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description="Run a vLLM (or reference) server with runtime LoRA loading until "
                                             "interrupted. Extra vLLM arguments go after '--'.")
    ap.add_argument("--model", required=True, help="base model (HF id or local directory; 'tiny' for reference)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--venv-python", default=os.environ.get("VLLM_PYTHON"),
                    help="python of the vLLM environment (default $VLLM_PYTHON, else this python)")
    ap.add_argument("--log-path", default="vllm_server.log")
    ap.add_argument("--kind", choices=("vllm", "reference"), default="vllm")
    ap.add_argument("--served-model-name", default=None)
    ap.add_argument("--max-lora-rank", type=int, default=64)
    ap.add_argument("--max-loras", type=int, default=2)
    ap.add_argument("--startup-timeout-s", type=float, default=900.0)
    args = ap.parse_args(argv)
    server = VLLMServer(args.model, args.port, args.venv_python, args.log_path, extra, kind=args.kind,
                        served_model_name=args.served_model_name, max_lora_rank=args.max_lora_rank,
                        max_loras=args.max_loras, startup_timeout_s=args.startup_timeout_s)

    def on_sigterm(*_):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_sigterm)
    try:
        server.start()
        print(f"{args.kind} server healthy at {server.url} (model {server.served_model_name}); log: {args.log_path}",
              flush=True)
        while server.is_alive():
            time.sleep(1.0)
        server.check_alive()
    except KeyboardInterrupt:
        pass
    except (ServerStartError, ServerDiedError) as e:
        print(str(e), file=sys.stderr, flush=True)
        return 1
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
