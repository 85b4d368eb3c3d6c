#!/usr/bin/env bash
# Session 49, call 2 (carry .gpu/run): the H100's own untuned default at small M
# (configs.small_m_deep, triton_gemm.untuned_config) and its block128 M = 32 deferral, held out
# and on the 29 shapes, against the lean cuBLASLt; "rule" is the H200's untuned choice (the
# shared default), "deep" the deep tile from the pair (on an H200 it answers whether the deep
# tile wins at M = 1-8 there).
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-560}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local l=$(( $(left) - 5 )); [ "$l" -lt 1 ] && l=1; [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
O=$OUT/call2
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
# held out: Gemma-3-27B, Yi-1.5-34B, Phi-3-medium, GLM-4-9B, Llama-3.2 1B / 3B, Llama-3.1-70B
# TP8, DeepSeek-V3's q_a / kv_a, 16-160 tiles of BLOCK_N 64 and past them (10304, 11264, 960)
H=8192x5376,5376x4096,5376x21504,9216x7168,7168x7168,7168x20480,7680x5120,5120x17920
H=$H,4096x13696,5120x3072,3072x3072,3072x8192,3072x2048,2048x2048,2048x8192,1280x8192
H=$H,7168x8192,8192x3584,1536x7168,2112x7168,10304x4096,11264x4096,960x4096
run heldout 170 --shapes "$H" --m 1,2,4,8 --schemes per_tensor \
  --backends cublaslt,untuned,rule,deep
S=6144x4096,4096x4096,1024x4096,28672x4096,4096x14336,24576x4096,4096x12288,10240x5120
S=$S,5120x8192,51200x5120,5120x25600,10240x8192,8192x8192,57344x8192,8192x28672
S=$S,1280x8192,8192x1024,7168x8192,8192x3584,5120x2048,2048x4096
S=$S,16384x5120,14336x5120,5120x6144,6144x5120,12288x5120,1024x5120,34816x5120,5120x17408
run small_m 170 --shapes "$S" --m 1,2,4,8 --schemes per_tensor \
  --backends cublaslt,untuned,rule,deep
# block128 at M = 16-64 on N = 8704-11264 (the split-2 wave-fit class) and neighbours
B=10240x8192,10240x5120,9216x7168,9216x8192,8704x4096,11264x4096,11264x8192,10240x12288
B=$B,6144x4096,6144x5120,8192x8192
run b128_m32 120 --shapes "$B" --m 16,32,64 --schemes block128 --backends cublaslt,untuned,rule
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
