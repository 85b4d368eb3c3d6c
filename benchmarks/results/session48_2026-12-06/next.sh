#!/usr/bin/env bash
# The next session's first device call (an H200 answers what session 48 left; an H100 repeats
# it; carry .gpu/run), against the lean cuBLASLt:
# 1. call8.sh's 18 shapes, per_tensor, M = 1-8: the untuned default against the deep tile
#    from the pair (the H100 gained 1.06-1.41x with it at M = 2 / 4; on the H200 in session
#    19, deep_default_H200_2026-12-02/call6/, 4096x14336 lost at M = 2 / 3, 0.80 / 0.86x,
#    4096x4096 gained 1.20x);
# 2. the untuned rule as shipped (_split_defers on both GPUs) on session 39's 29 shapes x
#    M = 1-64 x three schemes, then DeepSeek-V3's and V4's 12.
# The device tool returns at most 8 files a call: the logs travel as one tarball.
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-570}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local l=$(( $(left) - 5 )); [ "$l" -lt 1 ] && l=1; [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
O=$OUT/next
mkdir -p "$O" /tmp/un
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
[ -f .gpu/run/prebuilt.tar.xz ] && tar xJf .gpu/run/prebuilt.tar.xz -C /tmp/un
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)" | tee -a "$O/status.txt"
run() {  # NAME LIMIT bench_gemm.py args...
  local name=$1 l=$2; shift 2
  timeout "$(lim "$l")" python3 benchmarks/bench_gemm.py "$@" --precompile --replays 10 \
    --rounds 3 --json "$O/$name.json" > "$O/$name.log" 2>&1
  echo "$name rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -A12 "slower than" "$O/$name.log" | head -12
}
S=4096x2048,4096x4096,4096x7168,4096x8192,4096x12288,4096x14336,5120x2048,5120x4096
S=$S,5120x6144,5120x8192,5120x17408,5120x25600,4608x4096,6144x4096,8192x8192,2048x4096
S=$S,10240x5120,1024x5120
run deep_m2 90 --shapes "$S" --m 1,2,3,4,8 --schemes per_tensor --backends cublaslt,untuned,deep
S=6144x4096,4096x4096,1024x4096,28672x4096,4096x14336,24576x4096,4096x12288,10240x5120
S=$S,5120x8192,51200x5120,5120x25600,10240x8192,8192x8192,57344x8192,8192x28672
S=$S,1280x8192,8192x1024,7168x8192,8192x3584,5120x2048,2048x4096
S=$S,16384x5120,14336x5120,5120x6144,6144x5120,12288x5120,1024x5120,34816x5120,5120x17408
run untuned 200 --shapes "$S" --m 1,2,4,8,16,32,64 --schemes per_tensor,channel_token,block128 \
  --backends cublaslt,untuned
D=2112x7168,24576x1536,7168x16384,36864x7168,7168x18432,4096x7168,7168x2048
D=$D,1536x4096,32768x1024,8192x1024,4096x8192,4096x2048
run untuned_deepseek 110 --shapes "$D" --m 1,2,4,8,16,32,64 --schemes block128,per_tensor \
  --backends cublaslt,untuned
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
