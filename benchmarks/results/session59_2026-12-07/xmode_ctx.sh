#!/usr/bin/env bash
# Session 59's fifth device call (carry .gpu/run, with x_cache_new.json: call 4's new-arm
# cache, tuned on an H100: `gunzip -c benchmarks/results/session59_2026-12-07/x/
# tuning_cache_new.json.gz > .gpu/run/x_cache_new.json`, one path; on another GPU it stops):
# each tuned key's x mode flipped in the tower (bench_override.py, same tile, arms
# alternated, 4 rounds) at M = 1, 8, 32: does the tower rank the two x modes as the tuner's
# isolated chain did?
# Outputs: xc/override_m{1,8,32}.json, status.txt, logs.tgz.
#   BUDGET=300 OUT=$OUT bash benchmarks/results/session59_2026-12-07/xmode_ctx.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-300}"
O=$OUT/xc
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
case "$GPU" in *H100*) ;; *) echo "not an H100: stopped" | tee -a "$O/status.txt"; exit 0 ;; esac
device_setup .gpu/run "$O"
mkdir -p /tmp/xc
cp .gpu/run/x_cache_new.json /tmp/xc/nvidia-h100-80gb-hbm3.json
ov() {  # M arms
  FP8TOWER_CACHE_DIR=/tmp/xc timeout -k 10 "$(lim 90)" python3 benchmarks/bench_override.py \
    --schemes per_tensor --m "$1" --rounds 4 --arms "$2" --json "$O/override_m$1.json" \
    > "$O/override_m$1.log" 2>&1
  echo "override m$1 rc=$? left=$(left)" | tee -a "$O/status.txt"
  tail -1 "$O/override_m$1.log"
}
ov 1 "cached,prequant=true@5120x6144,prequant=false@14336x5120+16384x5120"
ov 8 "cached,prequant=false@5120x6144,prequant=false@14336x5120+16384x5120"
ov 32 "cached,prequant=true@14336x5120,prequant=false@5120x6144+16384x5120"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
