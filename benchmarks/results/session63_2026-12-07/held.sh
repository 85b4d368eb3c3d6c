#!/usr/bin/env bash
# Session 63 (carry .gpu/run; an H200 wanted): the 27B merged towers with and without
# tuning/cache.apply_held_layouts (a tie takes a tile-major layout the same shape's other
# buckets already run: no second copy). Per scheme (SCHEMES, default all three) at MS
# (default 1,8,32): tuned from cold in `bench tower` ("held", this code), then the same cache
# timed with the rule turned off in the process ("none": the tie rule of session 62), the
# two alternated (held, none, none, held), 2 rounds each.
# Outputs: DIR (default held)/status.txt, DIR/held.tgz (tower JSON and logs, the caches).
#   BUDGET=590 OUT=$OUT bash benchmarks/results/session63_2026-12-07/held.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-590}"
O=$OUT/${DIR:-held}
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
OFF="import fp8tower.tuning.cache as c; c.apply_held_layouts = lambda entries, keep=(): []"
tower() {  # scheme tag code
  FP8TOWER_CACHE_DIR=/tmp/held_$1 timeout -k 10 "$(lim 150)" python3 -c "$3
from fp8tower.cli import main; main()" bench tower \
    --model qwen3.5-27b --arms merged --backends auto --scheme "$1" --m "${MS:-1,8,32}" \
    --rounds 2 --json "$O/tower_$1_$2.json" > "$O/tower_$1_$2.log" 2>&1
  echo "$1 $2 rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "│ $1" "$O/tower_$1_$2.log" | head -4
}
for scheme in ${SCHEMES:-per_tensor channel_token block128}; do
  cold_cache .gpu/run "/tmp/held_$scheme"
  tower "$scheme" held "pass"
  tower "$scheme" none "$OFF"; tower "$scheme" none2 "$OFF"; tower "$scheme" held2 "pass"
  cp /tmp/held_$scheme/*.json "$O/cache_$scheme.json" 2>/dev/null
done
(cd "$O" && tar czf held.tgz ./*.log ./*.json && rm -f ./*.log ./*.json)
