#!/usr/bin/env bash
# Session 63's first device call (carry .gpu/run; an H200 wanted): the two #12 measurements
# session 62 did not reach on the H200, with its code. First session 54's call8.sh (the
# paired trace of the per_tensor tower tuned in the run: the us/call column at M = 1 / 32;
# about 60 s on a warm H100), then weight_only's per-GEMM scorecard alone (session 62 timed
# per_tensor's, `session62_2026-12-07/sc/`): the tower's 9 shapes x M = 1 / 8 / 16 / 32,
# auto tuned from cold against cuBLASLt.
# Outputs: c8/ (call8.sh's), wo/scorecard.json, wo/cache.json, wo/logs.tgz, wo/status.txt.
#   BUDGET=580 OUT=$OUT bash benchmarks/results/session63_2026-12-07/call1.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-580}"
TOTAL=$BUDGET
BUDGET=170 OUT=$OUT bash benchmarks/results/session54_2026-12-06/call8.sh
BUDGET=$TOTAL
O=$OUT/wo
mkdir -p "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1) left=$(left)" \
  | tee -a "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
cold_cache .gpu/run /tmp/wo
s=$(date +%s)
FP8TOWER_CACHE_DIR=/tmp/wo timeout -k 10 "$(lim 420)" python3 benchmarks/bench_gemm.py \
  --shapes tower --m 1,8,16,32 --schemes weight_only --backends cublaslt,auto \
  --precompile --replays 10 --rounds 2 --json "$O/scorecard.json" > "$O/scorecard.log" 2>&1
echo "scorecard rc=$? in $(( $(date +%s) - s ))s left=$(left)" | tee -a "$O/status.txt"
cp /tmp/wo/*.json "$O/cache.json"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
