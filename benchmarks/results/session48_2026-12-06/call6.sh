#!/usr/bin/env bash
# Session 48's sixth call (the H200 of calls 4-5; carry .gpu/run): (1) the H200 rule's cells
# past 2% in call 5's untuned run, again with their neighbours (M = 1-64, per_tensor and
# block128, the lean cuBLASLt); (2) the GPU suite on the H200 with what is left.
set -uo pipefail
O=$OUT/call6
mkdir -p "$O" /tmp/un ~/.cache/fp8tower tests/.cache
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
for c in /tmp/un ~/.cache/fp8tower tests/.cache; do
  [ -f .gpu/run/prebuilt.tar.xz ] && tar xJf .gpu/run/prebuilt.tar.xz -C "$c"
done
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
S=10240x5120,10240x8192,5120x2048,4096x2048,7168x2048,12288x5120,14336x5120,16384x5120
S=$S,6144x5120,2048x4096,5120x4096
FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout 130 \
  python3 benchmarks/bench_gemm.py --shapes "$S" --m 1,2,4,8,16,32,64 \
  --schemes per_tensor,block128 --backends cublaslt,untuned --precompile \
  --replays 10 --rounds 3 --json "$O/recheck.json" > "$O/recheck.log" 2>&1
echo "recheck rc=$?" | tee -a "$O/status.txt"
grep -A12 "slower than" "$O/recheck.log" | head -12
timeout "${LIMIT:-300}" python3 -m pytest -q -m gpu -p no:cacheprovider $(pytest_par 12 240) \
  -rfE --tb=short > "$O/suite.log" 2>&1
echo "gpu suite rc=$?" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/suite.log" | tail -15
