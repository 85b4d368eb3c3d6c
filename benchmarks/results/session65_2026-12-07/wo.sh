#!/usr/bin/env bash
# Session 65 (an H200, carry .gpu/run): weight_only's per-GEMM scorecard alone, as session
# 63's call1.sh times it after its paired trace: the 27B tower's 9 shapes x M = 1 / 8 / 16 /
# 32, auto tuned from cold against cuBLASLt (161 s on session 64's H100).
# Outputs: wo/scorecard.json, wo/cache.json, wo/logs.tgz, wo/status.txt.
#   BUDGET=300 OUT=$OUT bash benchmarks/results/session65_2026-12-07/wo.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-300}"
O=$OUT/wo
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
cold_cache .gpu/run /tmp/wo
s=$(date +%s)
FP8TOWER_CACHE_DIR=/tmp/wo timeout -k 10 "$(lim 280)" python3 benchmarks/bench_gemm.py \
  --shapes tower --m 1,8,16,32 --schemes weight_only --backends cublaslt,auto \
  --precompile --replays 10 --rounds 2 --json "$O/scorecard.json" > "$O/scorecard.log" 2>&1
echo "scorecard rc=$? in $(( $(date +%s) - s ))s left=$(left)" | tee -a "$O/status.txt"
cp /tmp/wo/*.json "$O/cache.json"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
