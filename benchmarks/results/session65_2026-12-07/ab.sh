#!/usr/bin/env bash
# Session 65 (an H200 wanted, carry .gpu/run): the 27B merged towers, one cache each scheme,
# under three rules. Per scheme (SCHEMES, default all three) at MS (default 1,8,32): tuned
# from cold in `bench tower` ("cur": this code, the graph taking a tie's fastest GPU time),
# then the same cache timed with FP8TOWER_HOST_TIE=1 ("host": the graph takes the eager
# host tie, as before session 65) and with tuning/cache.apply_held_layouts off ("none"),
# alternated: cur, host, none, none, host, cur; 2 rounds each.
# Outputs: DIR (default ab)/status.txt, DIR/ab.tgz (tower JSON and logs, the caches).
#   BUDGET=560 OUT=$OUT bash benchmarks/results/session65_2026-12-07/ab.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-560}"
O=$OUT/${DIR:-ab}
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
OFF="import fp8tower.tuning.cache as c; c.apply_held_layouts = lambda entries, keep=(): []"
tower() {  # scheme tag code [FP8TOWER_HOST_TIE, empty: unset]
  FP8TOWER_HOST_TIE=${4:-} FP8TOWER_CACHE_DIR=/tmp/ab_$1 timeout -k 10 "$(lim 150)" \
    python3 -c "$3
from fp8tower.cli import main; main()" bench tower \
    --model qwen3.5-27b --arms merged --backends auto --scheme "$1" --m "${MS:-1,8,32}" \
    --rounds 2 --json "$O/tower_$1_$2.json" > "$O/tower_$1_$2.log" 2>&1
  echo "$1 $2 rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "│ $1" "$O/tower_$1_$2.log" | head -4
}
for scheme in ${SCHEMES:-per_tensor channel_token block128}; do
  cold_cache .gpu/run "/tmp/ab_$scheme"
  tower "$scheme" cur "pass"
  tower "$scheme" host "pass" 1; tower "$scheme" none "$OFF"; tower "$scheme" none2 "$OFF"
  tower "$scheme" host2 "pass" 1; tower "$scheme" cur2 "pass"
  cp /tmp/ab_$scheme/*.json "$O/tuning_cache_$scheme.json" 2>/dev/null
done
(cd "$O" && tar czf ab.tgz ./*.log ./*.json && rm -f ./*.log ./*.json)
