#!/usr/bin/env bash
# Session 60's fifth device call (carry .gpu/run; either card): #12's per-GEMM scorecard, the
# 27B tower's 9 shapes x M = 1 / 8 / 16 / 32, per_tensor and weight_only, auto tuned from cold
# (cache emptied first) against cuBLASLt. From cold it took 380 s on an H100 here: session
# 54's call10.sh gives it at most 330 s, too few on a fresh machine, so this runs it alone.
# Outputs: sc/scorecard.json, tuning_cache.json (as cache.json), logs.tgz, status.txt.
#   BUDGET=500 OUT=$OUT bash benchmarks/results/session60_2026-12-07/scorecard.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-500}"
O=$OUT/sc
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
cold_cache .gpu/run /tmp/sc
s=$(date +%s)
FP8TOWER_CACHE_DIR=/tmp/sc timeout -k 10 "$(lim 470)" python3 benchmarks/bench_gemm.py \
  --shapes tower --m 1,8,16,32 --schemes per_tensor,weight_only --backends cublaslt,auto \
  --precompile --replays 10 --rounds 2 --json "$O/scorecard.json" > "$O/scorecard.log" 2>&1
echo "scorecard rc=$? in $(( $(date +%s) - s ))s left=$(left)" | tee -a "$O/status.txt"
cp /tmp/sc/*.json "$O/cache.json"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
