#!/usr/bin/env bash
# Session 53's seventh device call, not run (no machine could be started; the next
# session's first: BUDGET=400; carry .gpu/run; either card, an H200 wanted): #12's
# per-GEMM scorecard refreshed with today's code (last: sessions 23 / 26), tuned from cold in
# the run (an empty cache but the prebuilt CUTLASS libraries): bench_gemm.py on the 27B
# tower's shapes at M = 1 / 8 / 16 / 32, auto against cuBLASLt, per_tensor then weight_only
# (the read ceiling measured in the run). First the GPU bit test of x quantized in the GEMM
# (its M = 3 case, rows tiled for all three schemes, added after call3's suite).
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-400}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/c7
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
timeout -k 10 "$(lim 120)" python3 -m pytest -q -m gpu -p no:cacheprovider -rfE --tb=short \
  "tests/test_gpu_plan.py::test_in_kernel_quant_is_bit_exact_on_gpu" > "$O/tests.log" 2>&1
echo "tests rc=$? left=$(left)" | tee -a "$O/status.txt"
tail -1 "$O/tests.log"
unpack_prebuilt .gpu/run /tmp/sc
# one run, both schemes: its JSON is written after each scheme ("complete": false until
# the last), so per_tensor's rows survive a timeout in weight_only's
FP8TOWER_CACHE_DIR=/tmp/sc timeout -k 10 "$(lim 250)" python3 benchmarks/bench_gemm.py \
  --shapes tower --m 1,8,16,32 --schemes per_tensor,weight_only --backends cublaslt,auto \
  --precompile --replays 10 --rounds 2 --json "$O/scorecard.json" > "$O/scorecard.log" 2>&1
echo "scorecard rc=$? left=$(left)" | tee -a "$O/status.txt"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
