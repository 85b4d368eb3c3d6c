#!/usr/bin/env bash
# Session 48's fourth call (H100; carry .gpu/run): block128's split-2 three-stage default
# (N = 8704-11264, 0.73-0.94 waves at M <= 32), the tile of the one cell the H100's rule
# still loses by more than 2% (10240x8192 at M = 32: 0.955 / 0.993 / 0.957 / 0.968x over
# sessions 45, 47 and call 1 here). Its family at M = 16 / 32 / 64 against cuBLASLt, the
# default's neighbours (4 stages: its base tile, 1.21 waves; split 1; split 3) and the tuned
# choice (auto, tuned here in a fresh cache).
set -uo pipefail
O=$OUT/call4
mkdir -p "$O" /tmp/un /tmp/tuned
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
for c in /tmp/un /tmp/tuned; do
  [ -f .gpu/run/prebuilt.tar.xz ] && tar xJf .gpu/run/prebuilt.tar.xz -C "$c"
done
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
S=8704x8192,9216x8192,9728x8192,10240x8192,11264x8192,10240x5120,10240x14336,9216x4096
S=$S,11264x14336
A="cublaslt,untuned,triton[num_stages=4],triton[split_k=1],triton[split_k=3],auto"
FP8TOWER_CACHE_DIR=/tmp/tuned timeout "${LIMIT:-400}" \
  python3 benchmarks/bench_gemm.py --shapes "$S" --m 16,32,64 --schemes block128 \
  --backends "$A" --precompile --replays 10 --rounds 3 --json "$O/family.json" \
  > "$O/family.log" 2>&1
echo "family rc=$?" | tee -a "$O/status.txt"
grep -A12 "slower than" "$O/family.log" | head -20
tail -2 "$O/family.log"
