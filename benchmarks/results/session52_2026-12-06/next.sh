#!/usr/bin/env bash
# The next session's first device call, prepared in session 52 (carry .gpu/run; either
# card, an H200 wanted): fp8_gemm.x_rows (per_tensor x quantized in the GEMM at M = 2-8
# converts its M rows, not a 16-row tile) against itself forced off, on one machine.
# 1. call4.sh once (PAIRS=1): bench_gemm.py on the 27B tower's shapes and four more at
#    M = 2, 4, 8 (the shared default, nodeep, deep_own, cuBLASLt), forced off, then as
#    committed; into $OUT/c4.
# 2. the 27B tower, merged, per_tensor, auto tuned in the run from an empty cache dir per
#    arm (M = 8's keys seeded from M = 1's best), M = 1 / 8, 2 rounds: as committed, then
#    forced off, one after the other (#12's M = 8 target: within 5% of M = 1; session 48's
#    H200: 1.050); into $OUT/next.
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-560}"
BUDGET=220 PAIRS=1 bash benchmarks/results/session52_2026-12-06/call4.sh  # its own clock
O=$OUT/next
mkdir -p "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" >> "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1  # call4's device_setup installed
unpack_prebuilt .gpu/run /tmp/tw_on /tmp/tw_off  # the tuner's CUTLASS libraries, per arm
for arm in on off; do  # call4.sh's sitecustomize forces x_rows off (workers too)
  pp=$PYTHONPATH
  [ $arm = off ] && pp=/tmp/x_rows_off:$PYTHONPATH
  FP8TOWER_CACHE_DIR=/tmp/tw_$arm PYTHONPATH=$pp timeout -k 10 "$(lim 140)" \
    python3 -m fp8tower bench tower --model qwen3.5-27b --arms merged --backends auto \
    --scheme per_tensor --m 1,8 --rounds 2 --json "$O/tower_$arm.json" > "$O/tower_$arm.log" 2>&1
  echo "tower $arm rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "│ per_tensor" "$O/tower_$arm.log" | head -4
done
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
