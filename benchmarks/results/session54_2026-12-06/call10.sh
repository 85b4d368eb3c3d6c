#!/usr/bin/env bash
# Session 54's fourth device call (carry .gpu/run): on an H200 only (#12's targets are the
# H200's; on any other card it stops at once, having spent only the machine's start): the
# per-GEMM scorecard as call9 ran it on an H100 (tuned from cold, cache /tmp/sc10), then
# call8.sh's tower and paired traces with what time is left.
#   BUDGET=560 OUT=$OUT bash benchmarks/results/session54_2026-12-06/call10.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-560}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/c10
mkdir -p "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
case "$GPU" in *H200*) ;; *) echo "not an H200: stopped" | tee -a "$O/status.txt"; exit 0 ;; esac
device_setup .gpu/run "$O"
cold_cache .gpu/run /tmp/sc10
rm -rf /tmp/tr /tmp/trace_m*  # call8's, from cold even on a machine kept warm (session 56)
FP8TOWER_CACHE_DIR=/tmp/sc10 timeout -k 10 "$(lim 330)" python3 benchmarks/bench_gemm.py \
  --shapes tower --m 1,8,16,32 --schemes per_tensor,weight_only --backends cublaslt,auto \
  --precompile --replays 10 --rounds 2 --json "$O/scorecard.json" > "$O/scorecard.log" 2>&1
echo "scorecard rc=$? left=$(left)" | tee -a "$O/status.txt"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
BUDGET=$(( $(left) - 5 )) OUT=$O bash benchmarks/results/session54_2026-12-06/call8.sh
