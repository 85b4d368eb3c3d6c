#!/usr/bin/env bash
# Session 17, device call 5 (run from the repository root on the GPU machine, .gpu carried),
# with configs.PDL_PAIR at prefetch 1: the GPU tests of PDL launches and launch plans; call 3's
# cache at prefetch 1 (before) against it retuned in context at M = 1, 8 (after), the merged
# 27B tower at M = 1, 8, 16, 32, arms alternated. (A first try, with the whole GPU suite and
# a paired trace after, lost its machine mid-call: the device time that was left allowed
# this much.)
set -uo pipefail
OUT=${OUT:-out}
mkdir -p "$OUT/c5"
PYTHONPATH=$PWD/src timeout 80 python3 -m pytest -q -m gpu -p no:cacheprovider -n 12 --timeout 70 -rf \
  tests/test_graph_edges.py tests/test_gpu_plan.py > "$OUT/c5/tests.log" 2>&1
echo "tests rc=$?"; tail -3 "$OUT/c5/tests.log"
CACHE_JSON=benchmarks/results/prefetch_depth_H200_2026-12-02/call3/tuning_cache.json \
  RESTAMP_ARGS="--prefetch 1" TOWER_M=1,8 BENCH_M=1,8,16,32 \
  TOWER_SCHEMES=per_tensor,channel_token,block128 RETUNE_S=200 \
  bash benchmarks/retune_ab.sh 2>&1 | tail -8
