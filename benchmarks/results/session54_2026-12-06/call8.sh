#!/usr/bin/env bash
# Session 54's second device call (carry .gpu/run; either card, an H200 wanted): #12's
# paired trace with today's code (last: session 35, 2.38-3.00 us a call beyond the bytes):
# the 27B tower, merged, per_tensor, auto tuned in the run from an empty cache (bench tower
# at M = 1 / 32, 2 rounds: the tower's own numbers too), then `trace capture` at M = 1 and
# M = 32 on that cache and `trace attribute` of each (the us/call column; at M = 32, where
# the step's 12% over M = 1 goes: GEMMs, pre-passes or stand-ins).
#   BUDGET=400 OUT=$OUT bash benchmarks/results/session54_2026-12-06/call8.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-400}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/c8
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
unpack_prebuilt .gpu/run /tmp/tr
FP8TOWER_CACHE_DIR=/tmp/tr timeout -k 10 "$(lim 200)" python3 -m fp8tower bench tower \
  --model qwen3.5-27b --arms merged --backends auto --scheme per_tensor --m 1,32 --rounds 2 \
  --json "$O/tower_per_tensor.json" > "$O/tower.log" 2>&1
echo "tower rc=$? left=$(left)" | tee -a "$O/status.txt"
grep -E "│ per_tensor" "$O/tower.log" | head -4
for m in 1 32; do
  FP8TOWER_CACHE_DIR=/tmp/tr timeout -k 10 "$(lim 90)" python3 -m fp8tower trace capture \
    --model qwen3.5-27b --arm merged --backend auto --m $m --scheme per_tensor \
    --out /tmp/trace_m$m > "$O/capture_m$m.log" 2>&1
  echo "capture m$m rc=$? left=$(left)" | tee -a "$O/status.txt"
  timeout -k 10 "$(lim 40)" python3 -m fp8tower trace attribute /tmp/trace_m$m \
    --json "$O/attr_m$m.json" > "$O/attr_m$m.log" 2>&1
  echo "attribute m$m rc=$? left=$(left)" | tee -a "$O/status.txt"
  head -20 "$O/attr_m$m.log"
done
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
