#!/usr/bin/env bash
# Start a vLLM OpenAI-compatible server with runtime LoRA loading, for generation=vllm_server.
#
#   VLLM_PYTHON=/opt/vllm-venv/bin/python launch/vllm_server.sh MODEL [PORT] [RUN_DIR] [-- extra vLLM args]
#
# MODEL: HF id or local directory (the served name defaults to it; set generation.served_model_name
# to the same string). PORT: default 8000 (loopback only). RUN_DIR: the server log goes to
# RUN_DIR/vllm_server.log (default runs/vllm_server). The launcher (launch/vllm_server.py, stdlib only,
# run with this environment's python) starts vLLM from the vLLM venv, waits for /health, prints
# "... healthy at http://127.0.0.1:PORT", and on Ctrl-C/SIGTERM stops vLLM's whole process group.
# VLLM_KIND=reference starts the CPU reference server instead (no vLLM needed; for trying the wiring).
# Build the vLLM venv first: see launch/vllm-requirements.txt.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -lt 1 ]]; then
  sed -n '2,13p' "$0"
  exit 2
fi
MODEL=$1; shift
PORT=8000; RUN_DIR=runs/vllm_server
if [[ $# -gt 0 && $1 != "--" ]]; then PORT=$1; shift; fi
if [[ $# -gt 0 && $1 != "--" ]]; then RUN_DIR=$1; shift; fi
KIND=${VLLM_KIND:-vllm}
if [[ $KIND == vllm && -z ${VLLM_PYTHON:-} ]]; then
  echo "set VLLM_PYTHON to the python of the vLLM venv (see launch/vllm-requirements.txt)" >&2
  exit 2
fi
mkdir -p "$RUN_DIR"
exec "${PYTHON:-python}" -m launch.vllm_server --kind "$KIND" --model "$MODEL" --port "$PORT" \
  --venv-python "${VLLM_PYTHON:-${PYTHON:-python}}" --log-path "$RUN_DIR/vllm_server.log" \
  --max-lora-rank "${VLLM_MAX_LORA_RANK:-64}" "$@"
