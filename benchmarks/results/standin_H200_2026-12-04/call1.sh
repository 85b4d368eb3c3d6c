#!/usr/bin/env bash
# Session 22, device call 1 (.gpu carried: wheels + the CUTLASS libraries of session 21's final
# cache): (a) session 21's call8 (the stand-ins on torch.add against tower/standin.rows_add,
# M = 1, 8, 32, three schemes, two rounds); (b) channel_token and block128 retuned in context at
# M = 8 with --full and 8 configs a key, before / after in one call.
set -uo pipefail
FINAL=${OUT:-out}
D=benchmarks/results/standin_H200_2026-12-04
CACHE=benchmarks/results/m32_gap_H200_2026-12-02/call4/retune_ab/nvidia-h200.json
start=$(date +%s)
OUT=$FINAL bash benchmarks/results/m32_gap_H200_2026-12-02/call8.sh
echo "call8 s=$(( $(date +%s) - start ))"
OUT=$FINAL CACHE_JSON=$CACHE TOWER_M=8 BENCH_M=1,8 TOWER_SCHEMES=channel_token,block128 \
  MAX_CONFIGS=8 TUNE_ARGS=--full ROUNDS=2 RETUNE_S=240 bash benchmarks/retune_ab.sh > "$FINAL/retune_ab.log" 2>&1
echo "retune_ab rc=$? s=$(( $(date +%s) - start ))"
tail -20 "$FINAL/retune_ab.log"
