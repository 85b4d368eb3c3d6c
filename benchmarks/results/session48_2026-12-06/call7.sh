#!/usr/bin/env bash
# Session 48's seventh call (carry .gpu/run): per_tensor at M = 2 / 4 on 64-80 tiles of
# BLOCK_N 64 (4096xK, 5120xK), where the untuned default is split K with x quantized in the
# GEMM and lost 3-4% to the lean cuBLASLt on an H200 (call 6: 5120x2048 0.962-0.971x,
# 5120x4096 0.960-0.961x), while at M = 8 / 16 the deep tile from the pre-pass pair
# (configs.deep_default, DEEP_PAIR_MIN_M = 8) ran 1.27-1.44x. The deep arm at M = 1-16.
set -uo pipefail
O=$OUT/call7
mkdir -p "$O" /tmp/un
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
[ -f .gpu/run/prebuilt.tar.xz ] && tar xJf .gpu/run/prebuilt.tar.xz -C /tmp/un
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
S=4096x2048,4096x4096,4096x7168,4096x8192,4096x12288,4096x14336,5120x2048,5120x4096
S=$S,5120x6144,5120x8192,5120x17408,5120x25600
FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "${LIMIT:-200}" \
  python3 benchmarks/bench_gemm.py --shapes "$S" --m 1,2,4,8 --schemes per_tensor \
  --backends cublaslt,untuned,deep --precompile --replays 10 --rounds 3 \
  --json "$O/deep_m2.json" > "$O/deep_m2.log" 2>&1
echo "deep_m2 rc=$?" | tee -a "$O/status.txt"
tail -2 "$O/deep_m2.log"
