#!/usr/bin/env bash
# Session 64 (carry .gpu/run; an H200 wanted: on the H100s of sessions 63-64 neither rule
# changed a key): the 27B merged towers under three tie rules, one cache each scheme. Per
# scheme (SCHEMES, default all three) at MS (default 1,8,32): tuned from cold in `bench
# tower` ("cur": this code), then the same cache timed with FP8TOWER_HOST_TIE=0 ("notie": a
# tie goes to the fastest GPU time, not the cheapest eager host path) and with
# tuning/cache.apply_held_layouts turned off in the process ("none": session 62's rule),
# alternated: cur, notie, none, none, notie, cur; 2 rounds each.
# Outputs: DIR (default ab)/status.txt, DIR/ab.tgz (tower JSON and logs, the caches).
#   BUDGET=400 OUT=$OUT bash benchmarks/results/session64_2026-12-07/ab.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-400}"
O=$OUT/${DIR:-ab}
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
OFF="import fp8tower.tuning.cache as c; c.apply_held_layouts = lambda entries, keep=(): []"
tower() {  # scheme tag code [HOST_TIE]
  FP8TOWER_HOST_TIE=${4:-1} FP8TOWER_CACHE_DIR=/tmp/ab_$1 timeout -k 10 "$(lim 150)" \
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
  tower "$scheme" notie "pass" 0; tower "$scheme" none "$OFF"; tower "$scheme" none2 "$OFF"
  tower "$scheme" notie2 "pass" 0; tower "$scheme" cur2 "pass"
  cp /tmp/ab_$scheme/*.json "$O/tuning_cache_$scheme.json" 2>/dev/null
done
(cd "$O" && tar czf ab.tgz ./*.log ./*.json && rm -f ./*.log ./*.json)
