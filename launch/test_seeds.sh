#!/usr/bin/env bash
# Issue 61's ten test seeds, in the two parts of the protocol written before any test run
# (docs/real_model.md#the-ten-seed-test-protocol): every run from one commit (a clean checkout: a dirty one is never
# pooled) on one machine kind (the pooling tool refuses runs whose provenance, CPU included, differs).
#   bash launch/test_seeds.sh a ROOT CACHE   # the base's test stages, seeds 5-9 (the main job's arms), NQ-Swap on 5
#   bash launch/test_seeds.sh b ROOT CACHE   # seeds 0-4 with SCOPE and misleading-only too; currency on all ten
#   bash launch/test_seeds.sh pool ROOT CACHE EVIDENCE   # the ten pooled, the evidence folder written (the currency
#                                                        # relation's pooled result committed in it too)
# ROOT: where the runs go (ROOT/seedN, ROOT/base, ROOT/currency); CACHE: the stage cache (real.stage_cache).
# Each run is a plain `python recipes/demo.py` (the main job) with the protocol's settings; a crashed seed is
# continued with the same command (finished stages reused), never rerun with other settings.
set -euo pipefail
cd "$(dirname "$0")/.."
part=${1:?part: a, b or pool}
root=${2:?ROOT: where the runs go}
cache=${3:?CACHE: the stage cache directory}
mkdir -p "$root" "$cache"
common=(real.split=test real.heldout_items=200 real.evaluate_continued=false "real.stage_cache=$cache")
nq=(real.nq_swap_questions=300)
comparison=(real.scope=true real.misleading_only=true)
vary=(--vary real.scope --vary real.misleading_only --vary real.nq_swap_questions)

seed_run() {  # seed, then extra overrides
  local seed=$1; shift
  echo "[test_seeds] seed $seed: $*  ($(date -u +%H:%M:%S))"
  python recipes/demo.py "seed=$seed" "${common[@]}" "$@" "out=$root/seed$seed" > "$root/seed$seed.log" 2>&1
}

case $part in
  a)
    echo "[test_seeds] the base's test stages ($(date -u +%H:%M:%S))"
    python recipes/demo.py seed=5 real.base_only=true "${common[@]}" "${nq[@]}" "out=$root/base" > "$root/base.log" 2>&1
    seed_run 5 "${nq[@]}"
    for s in 6 7 8 9; do seed_run "$s"; done
    python -m demos.real.second_relation "$root"/seed{5,6,7,8,9} --relation currency --split test \
      --out "$root/currency_a" --vary real.nq_swap_questions > "$root/currency_a.log" 2>&1
    ;;
  b)
    for s in 0 1 2 3 4; do seed_run "$s" "${comparison[@]}"; done
    python -m demos.real.second_relation "$root"/seed{0,1,2,3,4,5,6,7,8,9} --relation currency --split test \
      --out "$root/currency" "${vary[@]}" > "$root/currency.log" 2>&1
    python -m demos.real.second_relation "$root"/seed{0,1,2,3,4} --relation currency --split test \
      --out "$root/currency_comparison" --vary real.nq_swap_questions > "$root/currency_comparison.log" 2>&1
    ;;
  pool)
    evidence=${4:?EVIDENCE: the evidence folder to write (docs/evidence/<name>)}
    # the chosen arm and the base over the ten seeds (SCOPE and misleading-only, in five, are not pooled here) ...
    python -m demos.real.seeds "$root"/seed{0,1,2,3,4,5,6,7,8,9} --split test --arm ka_grpo "${vary[@]}" \
      --evidence "$evidence" --out "$root/pooled" --second-relation "$root/currency/second_relation.json"
    # ... and every arm over the five seeds that ran SCOPE and misleading-only (misleading-only's target)
    python -m demos.real.seeds "$root"/seed{0,1,2,3,4} --split test --arm ka_grpo --vary real.nq_swap_questions \
      --evidence "${evidence}_comparison" --out "$root/pooled_comparison" \
      --second-relation "$root/currency_comparison/second_relation.json"
    ;;
  *) echo "part: a, b or pool (got $part)" >&2; exit 2 ;;
esac
echo "[test_seeds] part $part done ($(date -u +%H:%M:%S))"
