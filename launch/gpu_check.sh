#!/usr/bin/env bash
# The vLLM rollout worker's check on a GPU machine: launch/vllm_check.sh (the same check as on a CPU host) after
# making sure a GPU is visible. Not part of CI (no GPU there); CI runs launch/vllm_check.sh on vLLM's CPU build.
#   VLLM_PYTHON=/opt/vllm-venv/bin/python bash launch/gpu_check.sh
# Environment: as launch/vllm_check.sh; VLLM_EXTRA defaults to "--enforce-eager --gpu-memory-utilization 0.4".
# Paste the whole output into the issue's closing note; its last line is the check's JSON.
set -uo pipefail
cd "$(dirname "$0")/.."
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || { echo "no GPU visible"; exit 1; }
: "${VLLM_PYTHON:?set VLLM_PYTHON to the python of the vLLM venv (see launch/vllm-requirements.txt)}"
export DEVICE=gpu VLLM_EXTRA=${VLLM_EXTRA:---enforce-eager --gpu-memory-utilization 0.4}
exec bash launch/vllm_check.sh
