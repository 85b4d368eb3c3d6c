#!/usr/bin/env bash
# Session 45's third call (carry .gpu/run/whl): 1. call1's block128 untuned losses against
# the lean cuBLASLt (split-2 defaults at M = 32 / 64: 10240x8192 0.955x, 8192x3584 0.969x,
# 5120x2048 0.970x) timed again with every shape whose default splits 2 there, and their
# neighbours, M = 16 / 32 / 64, 3 rounds ABBA: noise or a class? 2. the whole GPU suite on
# the session's final code (call1's was cut at ~98% with no failure).
set -uo pipefail
O=$OUT/call3
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
S=10240x8192,10240x5120,8192x3584,5120x2048,8192x8192,6144x4096,6144x5120,7168x8192
S=$S,8192x28672,8192x1024,8192x4096,8192x5120,9216x4096,10240x4096,6144x3072,5120x3072
mkdir -p /tmp/un
FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout 150 \
  python3 benchmarks/bench_gemm.py --shapes "$S" --m 16,32,64 \
  --schemes block128 --backends cublaslt,untuned --precompile --replays 10 --rounds 3 \
  --json "$O/split2_b128.json" > "$O/split2_b128.log" 2>&1
echo "split2 block128 rc=$?" | tee -a "$O/status.txt"
grep -A20 "slower than" "$O/split2_b128.log" | head -20
timeout 240 python3 -m pytest -q -m gpu -p no:cacheprovider -n 12 --timeout 200 -rfE \
  --tb=short > "$O/suite.log" 2>&1
echo "gpu suite rc=$?" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/suite.log" | tail -15
