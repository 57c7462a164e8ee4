"""The real-vLLM check, on a GPU machine only: ``launch/gpu_check.sh`` against a real vLLM server.

The other vLLM tests talk to the loopback reference server (``eval_hooks/backends/reference_server.py``),
which generates with the HF backend: they test the protocol, not vLLM. This test runs the prepared GPU
check, whose stale-weight probe must catch an adapter the server did not receive, and whose 3 GRPO steps
must each log a probe. It needs a CUDA GPU and a vLLM environment (``VLLM_PYTHON``, see
``launch/vllm-requirements.txt``); elsewhere it is skipped, saying which is missing.
"""

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _missing() -> str | None:
    import torch

    if not torch.cuda.is_available():
        return "no CUDA GPU"
    vllm_python = os.environ.get("VLLM_PYTHON")
    if not vllm_python or not Path(vllm_python).exists():
        return "VLLM_PYTHON does not name the python of a vLLM environment (launch/vllm-requirements.txt)"
    return None


@pytest.mark.slow
@pytest.mark.skipif(_missing() is not None, reason=f"real-vLLM probe: {_missing()}")
def test_real_vllm_probe_catches_a_stale_adapter_and_grpo_syncs_every_step(tmp_path):
    env = dict(os.environ, OUT=str(tmp_path / "gpu_check"), PORT=os.environ.get("VLLM_TEST_PORT", "8077"))
    out = subprocess.run(["bash", "launch/gpu_check.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=1800)
    log = out.stdout + out.stderr
    assert out.returncode == 0, log[-6000:]
    assert "stale adapter caught" in log, log[-6000:]
    assert "FAIL" not in log, log[-6000:]
