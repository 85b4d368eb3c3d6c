#!/usr/bin/env bash
# Session 48's eighth call (carry .gpu/run): DEEP_PAIR_MIN_M 8 -> 2 as shipped, the untuned
# default (now the deep tile from the pair at M = 2-7 on 64-95 tiles) against the lean
# cuBLASLt and the default without the deep tile (nodeep), per_tensor, M = 1-8: call 7's 12
# shapes and 6 of 96-132 tiles / other tiles as controls.
set -uo pipefail
O=$OUT/call8
mkdir -p "$O" /tmp/un
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
[ -f .gpu/run/prebuilt.tar.xz ] && tar xJf .gpu/run/prebuilt.tar.xz -C /tmp/un
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
S=4096x2048,4096x4096,4096x7168,4096x8192,4096x12288,4096x14336,5120x2048,5120x4096
S=$S,5120x6144,5120x8192,5120x17408,5120x25600,4608x4096,6144x4096,8192x8192,2048x4096
S=$S,10240x5120,1024x5120
FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "${LIMIT:-200}" \
  python3 benchmarks/bench_gemm.py --shapes "$S" --m 1,2,4,8 --schemes per_tensor \
  --backends cublaslt,untuned,nodeep --precompile --replays 10 --rounds 3 \
  --json "$O/deep_m2_shipped.json" > "$O/deep_m2_shipped.log" 2>&1
echo "deep_m2_shipped rc=$?" | tee -a "$O/status.txt"
grep -A12 "slower than" "$O/deep_m2_shipped.log" | head -12
tail -1 "$O/deep_m2_shipped.log"
