#!/usr/bin/env bash
# Session 48's third call (warm H100; carry .gpu/run): untuned against the lean cuBLASLt on
# DeepSeek-V3's and V4's 12 shapes again (call 1 ran it, rc 0 and no cell past 2%, but its
# JSON did not come back: the device tool returns at most 8 files a call).
set -uo pipefail
O=$OUT/call3
mkdir -p "$O" /tmp/un
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
[ -f .gpu/run/prebuilt.tar.xz ] && tar xJf .gpu/run/prebuilt.tar.xz -C /tmp/un
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
D=2112x7168,24576x1536,7168x16384,36864x7168,7168x18432,4096x7168,7168x2048
D=$D,1536x4096,32768x1024,8192x1024,4096x8192,4096x2048
FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout 150 \
  python3 benchmarks/bench_gemm.py --shapes "$D" --m 1,2,4,8,16,32,64 \
  --schemes block128,per_tensor --backends cublaslt,untuned --precompile \
  --replays 10 --rounds 3 --json "$O/untuned_deepseek.json" > "$O/untuned_deepseek.log" 2>&1
echo "untuned deepseek rc=$?" | tee -a "$O/status.txt"
grep -A12 "slower than" "$O/untuned_deepseek.log" | head -12
tail -3 "$O/untuned_deepseek.log"
