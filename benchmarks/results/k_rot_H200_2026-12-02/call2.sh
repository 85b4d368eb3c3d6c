#!/usr/bin/env bash
# Session 18, device call 2 (run from the repository root on the GPU machine, .gpu carried):
# K_ROT's GPU test with the SQNR criterion; then do-first 1 of session 17's note: per_tensor's
# merged keys retuned per GEMM with the fixed `tune --model --merged` and in context, wide
# (--max-configs 120), at M = 1, 8, 32, from session 17's final cache; the tower before /
# after at M = 1, 8, 16, 32, alternated (benchmarks/retune_ab.sh).
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT/c2"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
timeout 70 python3 -m pytest -q -m gpu -p no:cacheprovider -n 12 --timeout 60 -rf \
  tests/test_gpu.py -k k_rot > "$OUT/c2/k_rot_tests.log" 2>&1
echo "k_rot tests rc=$?"; tail -2 "$OUT/c2/k_rot_tests.log"
CACHE_JSON=benchmarks/results/prefetch_depth_H200_2026-12-02/call5/tuning_cache.json \
  TOWER_M=1,8,32 BENCH_M=1,8,16,32 TOWER_SCHEMES=per_tensor MAX_CONFIGS=120 RETUNE_S=330 \
  bash benchmarks/retune_ab.sh 2>&1 | tail -30
