#!/usr/bin/env bash
# Session 21, device call 2 (.gpu carried), the tree with configs.wide_in_gemm (from M = 32 the
# tuner times first the BLOCK_N 128 tile with x quantized in the GEMM, per_tensor and block128):
# (a) GPU tests: every priority config against the reference at M = 32 / 33;
# (b) session 20's cache against the same retuned in context at M = 32 with this tree
#     (retune_ab.sh), per_tensor and block128; the towers at M = 1 and 32, two rounds.
set -uo pipefail
FINAL=${OUT:-out}
OUT=/tmp/call2
mkdir -p "$OUT" "$FINAL"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$OUT/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
CACHE=benchmarks/results/prepass_group_H200_2026-12-02/call4/retune_ab/nvidia-h200.json
timeout 110 python3 -m pytest -q -m gpu -p no:cacheprovider -n 14 --timeout 100 tests/test_gpu.py \
  -k priority > "$OUT/tests.log" 2>&1
echo "tests rc=$? s=$(( $(date +%s) - start ))"; tail -3 "$OUT/tests.log"
OUT=$OUT CACHE_JSON=$CACHE TOWER_M=32 BENCH_M=1,32 TOWER_SCHEMES=per_tensor,block128 \
  RETUNE_S=240 ROUNDS=2 bash benchmarks/retune_ab.sh 2>&1 | grep -v "^    " | tail -40
echo "total s=$(( $(date +%s) - start ))"
tar -czf "$FINAL/call2.tgz" -C /tmp call2
