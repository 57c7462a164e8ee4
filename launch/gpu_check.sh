#!/usr/bin/env bash
# Prepared GPU check of the vLLM rollout worker (issue 5). Not part of CI.
#
# On one GPU machine, from the repository root, with the training environment active:
#   VLLM_PYTHON=/opt/vllm-venv/bin/python bash launch/gpu_check.sh
# Optional environment:
#   MODEL=<local model dir>    default: the built-in tiny-25m Llama (built locally, nothing downloaded)
#   RECIPE=<recipe name>       default: grpo_tiny (3 steps are run)
#   PORT=8000  OUT=runs/gpu_check  VLLM_EXTRA="--dtype float32 ..."  BENCH_PROMPTS=64  BENCH_N=8  BENCH_TOKENS=128
#
# What it does, and prints:
#   1. versions of both environments and the GPU;
#   2. starts real vLLM through launch/vllm_server.py (--enable-lora, runtime LoRA updates), waits for /health;
#   3. direct hot-sync check: a LoRA policy on the GPU is saved/loaded/probed twice (probe |Δlogp| printed),
#      then the trainer's weights move without a sync and the probe must raise StaleWeightsError;
#   4. 3 GRPO steps: python recipes/grpo.py recipe=$RECIPE generation=vllm_server ... (LoRA sync + probe
#      every step), then the probe differences and adapter versions from its metrics.jsonl;
#   5. rollout throughput through the HTTP backend (tokens/s);
#   6. the last server log lines. Exit status 0 only if every stage passed.
# Paste the whole output into the issue's closing note.
set -uo pipefail
cd "$(dirname "$0")/.."
# The scripts below import trainer/ and eval_hooks/ from this tree, which may be a copy that is not installed.
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

PORT=${PORT:-8000}
OUT=${OUT:-runs/gpu_check}
RECIPE=${RECIPE:-grpo_tiny}
PY=${PYTHON:-python}
: "${VLLM_PYTHON:?set VLLM_PYTHON to the python of the vLLM venv (see launch/vllm-requirements.txt)}"
export OUT PORT BENCH_PROMPTS=${BENCH_PROMPTS:-64} BENCH_N=${BENCH_N:-8} BENCH_TOKENS=${BENCH_TOKENS:-128}
rm -rf "$OUT"; mkdir -p "$OUT"
FAILED=()

echo "== 1. environment"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || { echo "no GPU visible"; exit 1; }
"$VLLM_PYTHON" -c "import vllm, torch, transformers; print('vllm env:', vllm.__version__, 'torch', torch.__version__, 'transformers', transformers.__version__)" || exit 1
"$PY" -c "import torch, transformers, peft; print('train env: torch', torch.__version__, 'transformers', transformers.__version__, 'peft', peft.__version__, 'cuda', torch.cuda.is_available())" || exit 1

if [[ -z ${MODEL:-} ]]; then
  MODEL=$("$PY" -c "from eval_hooks.models import ensure_tiny_model; print(ensure_tiny_model('tiny-25m'))") || exit 1
fi
export MODEL SERVED=gpu-check-base
echo "model: $MODEL (served as $SERVED)"

echo "== 2. start vLLM on 127.0.0.1:$PORT"
# float32 on both sides keeps the probe's numerical floor low; eager mode skips CUDA-graph capture.
"$PY" -m launch.vllm_server --kind vllm --model "$MODEL" --served-model-name "$SERVED" --port "$PORT" \
  --venv-python "$VLLM_PYTHON" --log-path "$OUT/vllm_server.log" --max-lora-rank 64 --startup-timeout-s 600 \
  -- ${VLLM_EXTRA:---dtype float32 --enforce-eager --gpu-memory-utilization 0.4 --max-model-len 1024} &
LAUNCHER=$!
trap 'kill -TERM $LAUNCHER 2>/dev/null; wait $LAUNCHER 2>/dev/null' EXIT
T0=$(date +%s)
until curl -sf "http://127.0.0.1:$PORT/health" >/dev/null; do
  if ! kill -0 $LAUNCHER 2>/dev/null; then echo "vLLM failed to start:"; tail -n 60 "$OUT/vllm_server.log"; exit 1; fi
  if (( $(date +%s) - T0 > 660 )); then echo "vLLM not healthy after 660s:"; tail -n 60 "$OUT/vllm_server.log"; exit 1; fi
  sleep 2
done
echo "vLLM healthy after $(( $(date +%s) - T0 ))s"

echo "== 3. direct hot-sync + stale probe against real vLLM"
"$PY" - <<'PYEOF' || FAILED+=("hot-sync")
import os, time, torch
from peft import LoraConfig, get_peft_model
from eval_hooks.backends.vllm_server import VLLMServerBackend
from eval_hooks.models import load_model, load_tokenizer
from trainer.evaluation.weight_sync import DEFAULT_PROBE_TEXT, AdapterSync, StaleWeightsError, sync_probe

tok = load_tokenizer(os.environ["MODEL"])
policy = get_peft_model(load_model(os.environ["MODEL"], device=os.environ.get("DEVICE", "cuda")),
                        LoraConfig(r=8, lora_alpha=16, target_modules=["q_proj", "k_proj", "v_proj", "o_proj"]))
def perturb(seed):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for n, p in policy.named_parameters():
            if "lora_" in n:
                p.copy_((torch.randn(p.shape, generator=g) * 0.2).to(p.device))
backend = VLLMServerBackend(f"http://127.0.0.1:{os.environ['PORT']}", os.environ["SERVED"], tok, timeout_s=120)
sync = AdapterSync(backend, os.path.join(os.environ["OUT"], "adapters"), tokenizer=tok, probe_threshold=0.05)
for step, seed in ((1, 1), (2, 2)):
    perturb(seed)
    t = time.time(); m = sync.maybe_sync(policy, step)
    print(f"sync step {step}: version={m['adapter_version']} checksum={m['adapter_checksum'][:12]} "
          f"probe_mean_abs_dlogp={m['probe_mean_abs_dlogp']:.3e} max={m['probe_max_abs_dlogp']:.3e} "
          f"trainer_shift={m.get('probe_trainer_shift', float('nan')):.3e} ({time.time() - t:.2f}s)")
perturb(3)  # the trainer moves on, the server keeps step 2: the probe must catch it
try:
    sync_probe(backend, policy, tok, DEFAULT_PROBE_TEXT, None, 0.05)
    raise SystemExit("FAIL: the probe did not catch a stale adapter")
except StaleWeightsError as e:
    print(f"stale adapter caught: probe_mean_abs_dlogp={e.metrics['probe_mean_abs_dlogp']:.3e}")
PYEOF

echo "== 4. 3 GRPO steps with generation=vllm_server (recipe=$RECIPE)"
"$PY" recipes/grpo.py recipe="$RECIPE" model.path="$MODEL" generation=vllm_server \
  generation.url="http://127.0.0.1:$PORT" generation.served_model_name="$SERVED" generation.sync_every=1 \
  trainer.max_steps=3 trainer.run_dir="$OUT/grpo" 2>&1 | tail -n 40
if [[ ${PIPESTATUS[0]} -ne 0 ]]; then FAILED+=("grpo"); fi
"$PY" - <<'PYEOF' || FAILED+=("grpo-metrics")
import json, os
path = os.path.join(os.environ["OUT"], "grpo", "metrics.jsonl")
rows = [json.loads(l) for l in open(path)] if os.path.exists(path) else []
probes = [r for r in rows if "probe_mean_abs_dlogp" in r]
for r in probes:
    print(f"step {r.get('step')}: adapter_version={r.get('adapter_version')} "
          f"checksum={str(r.get('adapter_checksum'))[:12]} probe_mean_abs_dlogp={r['probe_mean_abs_dlogp']:.3e}")
if len(probes) < 3:
    raise SystemExit(f"FAIL: expected probe metrics for 3 steps in {path}, found {len(probes)}")
PYEOF

echo "== 5. rollout throughput through HTTP"
"$PY" - <<'PYEOF' || FAILED+=("throughput")
import os, time
from eval_hooks.backends.base import GenerationRequest
from eval_hooks.backends.vllm_server import VLLMServerBackend
from eval_hooks.models import load_tokenizer
tok = load_tokenizer(os.environ["MODEL"])
b = VLLMServerBackend(f"http://127.0.0.1:{os.environ['PORT']}", os.environ["SERVED"], tok, timeout_s=300)
P, N, T = int(os.environ["BENCH_PROMPTS"]), int(os.environ["BENCH_N"]), int(os.environ["BENCH_TOKENS"])
reqs = [GenerationRequest(messages=[{"role": "user", "content": f"Question {i}: what is {i} + {i}?"}], n=N,
                          max_new_tokens=T, temperature=1.0) for i in range(P)]
b.generate(reqs[:2])  # warm-up
t = time.time(); out = b.generate(reqs); dt = time.time() - t
toks = sum(len(s.token_ids) for r in out for s in r.samples)
print(f"{P} prompts x n={N}, max {T} new tokens: {toks} tokens in {dt:.2f}s = {toks / dt:.0f} tokens/s")
PYEOF

echo "== 6. last server log lines"
tail -n 15 "$OUT/vllm_server.log"
if (( ${#FAILED[@]} )); then echo "GPU CHECK FAILED: ${FAILED[*]}"; exit 1; fi
echo "GPU CHECK PASSED"
