#!/usr/bin/env bash
# Session 18, device call 3 (run from the repository root on the GPU machine, .gpu carried):
# channel_token's and block128's merged keys retuned per GEMM and in context, wide
# (--max-configs 120), at M = 1, 8, 32, from call 2's cache (per_tensor retuned there); the
# tower before / after at M = 1, 8, 16, 32, alternated (benchmarks/retune_ab.sh).
set -uo pipefail
CACHE_JSON=benchmarks/results/k_rot_H200_2026-12-02/call2/tuning_cache.json \
  TOWER_M=1,8,32 BENCH_M=1,8,16,32 TOWER_SCHEMES=channel_token,block128 MAX_CONFIGS=120 \
  RETUNE_S=360 bash benchmarks/retune_ab.sh 2>&1 | grep -v "^    " | tail -40
