#!/usr/bin/env bash
# Session 66 (carry .gpu/run; an H200 wanted): the per_tensor tower tuned from cold in-process
# at M = 1 / 32 (as session 65's c8), its choices dumped (choices.py), then the same cache read
# by a fresh process at M = 32, dumped too: whether the process that tuned runs other kernels.
# Outputs: DIR (default ip)/status.txt, a.json, b.json, logs.
#   BUDGET=200 OUT=$OUT bash benchmarks/results/session66_2026-12-07/inproc.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-200}"
O=$OUT/${DIR:-ip}
S=benchmarks/results/session66_2026-12-07
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
cold_cache .gpu/run /tmp/ip
FP8TOWER_CACHE_DIR=/tmp/ip timeout -k 10 "$(lim 120)" python3 $S/choices.py --m "${MS:-1,32}" \
  --out "$O/a.json" > "$O/a.log" 2>&1
echo "a rc=$? left=$(left)" | tee -a "$O/status.txt"; tail -12 "$O/a.log"
cp /tmp/ip/*.json "$O/tuning_cache_ip.json"
FP8TOWER_CACHE_DIR=/tmp/ip timeout -k 10 "$(lim 60)" python3 $S/choices.py --m 32 \
  --out "$O/b.json" > "$O/b.log" 2>&1
echo "b rc=$? left=$(left)" | tee -a "$O/status.txt"; tail -12 "$O/b.log"
