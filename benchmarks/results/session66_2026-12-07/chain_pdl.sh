#!/usr/bin/env bash
# Session 66's prepared A/B (not run; carry .gpu/run; an H200 wanted): the tuner timing
# CUTLASS with its plan's PDL pre-pass (chain_pdl.py) against the tuner as it is. Per scheme
# (SCHEMES, default per_tensor) at MS (default 1,8,32): the 27B merged tower tuned from cold
# in `bench tower` by each tuner, each in its own cache ("cur", "pdl"), then timed again
# alternated: cur, pdl, pdl, cur (2 rounds each). Outputs: DIR (default chain)/status.txt,
# tower_*.json, the two caches, logs.tgz. About 320 s a scheme.
#   BUDGET=330 OUT=$OUT bash benchmarks/results/session66_2026-12-07/chain_pdl.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-330}"
O=$OUT/${DIR:-chain}
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
PDL="import sys; sys.path.insert(0, 'benchmarks/results/session66_2026-12-07')
import chain_pdl; chain_pdl.apply()"
tower() {  # scheme tag code limit
  FP8TOWER_CACHE_DIR=/tmp/chain_$1_${2%2} timeout -k 10 "$(lim "$4")" python3 -c "$3
from fp8tower.cli import main; main()" bench tower \
    --model qwen3.5-27b --arms merged --backends auto --scheme "$1" --m "${MS:-1,8,32}" \
    --rounds 2 --json "$O/tower_$1_$2.json" > "$O/tower_$1_$2.log" 2>&1
  echo "$1 $2 rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "│ $1" "$O/tower_$1_$2.log" | head -4
}
for scheme in ${SCHEMES:-per_tensor}; do
  cold_cache .gpu/run "/tmp/chain_${scheme}_cur" "/tmp/chain_${scheme}_pdl"
  tower "$scheme" cur "pass" 150; tower "$scheme" pdl "$PDL" 150
  tower "$scheme" pdl2 "$PDL" 50; tower "$scheme" cur2 "pass" 50
  for a in cur pdl; do cp /tmp/chain_${scheme}_$a/*.json "$O/tuning_cache_${scheme}_$a.json"; done
done
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
