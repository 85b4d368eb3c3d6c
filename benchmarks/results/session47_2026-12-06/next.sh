#!/usr/bin/env bash
# The next session's first device call (any card; an H200 re-measures #12's targets; carry
# .gpu/run), steps under what is left of BUDGET (s):
# 1. the 27B tower, merged, cuBLASLt against auto, all three W8A8 schemes, M = 1 / 8 / 16 / 32
#    (the step targets and M ratios, against the lean cuBLASLt since session 45);
# 2. untuned against the lean cuBLASLt on session 39's 29 shapes x M = 1-64 x three schemes
#    (on an H200 its own rule, never checked against the lean cuBLASLt), then DeepSeek-V3's
#    and V4's 12 shapes. The CUTLASS libraries are unpacked into that run's cache too: in
#    session 47 its closing accuracy check built them with nvcc and ran past the step's limit.
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-570}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local l=$(( $(left) - 5 )); [ "$l" -lt 1 ] && l=1; [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
O=$OUT/call1
mkdir -p "$O" /tmp/un ~/.cache/fp8tower
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
for c in ~/.cache/fp8tower /tmp/un; do
  [ -f .gpu/run/prebuilt.tar.xz ] && tar xJf .gpu/run/prebuilt.tar.xz -C "$c"
done
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
for s in per_tensor channel_token block128; do
  timeout "$(lim 110)" python3 -m fp8tower bench tower --model qwen3.5-27b --arms merged \
    --backends cublaslt,auto --scheme $s --m 1,8,16,32 --rounds 2 \
    --json "$O/tower_$s.json" > "$O/tower_$s.log" 2>&1
  echo "tower $s rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "│ (block128|per_tensor|channel_token)" "$O/tower_$s.log" | head -8
done
S=6144x4096,4096x4096,1024x4096,28672x4096,4096x14336,24576x4096,4096x12288,10240x5120
S=$S,5120x8192,51200x5120,5120x25600,10240x8192,8192x8192,57344x8192,8192x28672
S=$S,1280x8192,8192x1024,7168x8192,8192x3584,5120x2048,2048x4096
S=$S,16384x5120,14336x5120,5120x6144,6144x5120,12288x5120,1024x5120,34816x5120,5120x17408
FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "$(lim 170)" \
  python3 benchmarks/bench_gemm.py --shapes "$S" --m 1,2,4,8,16,32,64 \
  --schemes per_tensor,channel_token,block128 --backends cublaslt,untuned --precompile \
  --replays 10 --rounds 3 --json "$O/untuned.json" > "$O/untuned.log" 2>&1
echo "untuned rc=$? left=$(left)" | tee -a "$O/status.txt"
grep -A12 "slower than" "$O/untuned.log" | head -12
D=2112x7168,24576x1536,7168x16384,36864x7168,7168x18432,4096x7168,7168x2048
D=$D,1536x4096,32768x1024,8192x1024,4096x8192,4096x2048
FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "$(lim 110)" \
  python3 benchmarks/bench_gemm.py --shapes "$D" --m 1,2,4,8,16,32,64 \
  --schemes block128,per_tensor --backends cublaslt,untuned --precompile \
  --replays 10 --rounds 3 --json "$O/untuned_deepseek.json" > "$O/untuned_deepseek.log" 2>&1
echo "untuned deepseek rc=$? left=$(left)" | tee -a "$O/status.txt"
grep -A12 "slower than" "$O/untuned_deepseek.log" | head -12
