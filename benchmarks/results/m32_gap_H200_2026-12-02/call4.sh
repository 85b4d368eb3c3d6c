#!/usr/bin/env bash
# Session 21, device call 4 (.gpu carried; this tree with WIDE_IN_GEMM_MIN_M set to 8 in the
# call's copy, sed): does the BLOCK_N 128 tile with x quantized in the GEMM also win at
# M = 8 / 16? per_tensor retuned in context at M = 8, 16 (--full: both buckets explored) from
# call 3's cache; the towers at M = 1, 8, 16, 32, two rounds (retune_ab.sh).
set -uo pipefail
FINAL=${OUT:-out}
OUT=/tmp/call4
mkdir -p "$OUT" "$FINAL"
start=$(date +%s)
sed -i 's/^WIDE_IN_GEMM_MIN_M = 32$/WIDE_IN_GEMM_MIN_M = 8/' src/fp8tower/kernels/configs.py
grep -n "^WIDE_IN_GEMM_MIN_M" src/fp8tower/kernels/configs.py
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
CACHE=benchmarks/results/m32_gap_H200_2026-12-02/call3/retune_ab/nvidia-h200.json
OUT=$OUT CACHE_JSON=$CACHE TOWER_M=8,16 BENCH_M=1,8,16,32 TOWER_SCHEMES=per_tensor TUNE_ARGS=--full \
  RETUNE_S=240 ROUNDS=2 bash benchmarks/retune_ab.sh 2>&1 | grep -v "^    " | tail -40
echo "total s=$(( $(date +%s) - start ))"
tar -czf "$FINAL/call4.tgz" -C /tmp call4
