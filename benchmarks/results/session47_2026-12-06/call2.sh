#!/usr/bin/env bash
# Session 46's next2.sh, run in session 47, with DeepSeek-V4's shapes (the tower added in
# session 47) beside DeepSeek-V3's. Any card; carry .gpu/run. Untuned against the
# lean cuBLASLt on session 39's 29 shapes x M = 1-64, all three W8A8 schemes (on an H200: the
# H200's rule, never checked against the lean cuBLASLt), DeepSeek-V3's 7 shapes (block128,
# per_tensor), then the whole GPU suite.
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-570}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local l=$(( $(left) - 5 )); [ "$l" -lt 1 ] && l=1; [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
O=$OUT/call2
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
S=6144x4096,4096x4096,1024x4096,28672x4096,4096x14336,24576x4096,4096x12288,10240x5120
S=$S,5120x8192,51200x5120,5120x25600,10240x8192,8192x8192,57344x8192,8192x28672
S=$S,1280x8192,8192x1024,7168x8192,8192x3584,5120x2048,2048x4096
S=$S,16384x5120,14336x5120,5120x6144,6144x5120,12288x5120,1024x5120,34816x5120,5120x17408
mkdir -p /tmp/un
FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "$(lim 200)" \
  python3 benchmarks/bench_gemm.py --shapes "$S" --m 1,2,4,8,16,32,64 \
  --schemes per_tensor,channel_token,block128 --backends cublaslt,untuned --precompile \
  --replays 10 --rounds 3 --json "$O/untuned.json" > "$O/untuned.log" 2>&1
echo "untuned rc=$? left=$(left)" | tee -a "$O/status.txt"
grep -A30 "slower than" "$O/untuned.log" | head -30
# DeepSeek-V3's and V4's shapes (never in the untuned rule's fitting set), block128 and
# per_tensor (V4: transformers' DeepseekV4Config defaults, V4-Flash-shaped)
D=2112x7168,24576x1536,7168x16384,36864x7168,7168x18432,4096x7168,7168x2048
D=$D,1536x4096,32768x1024,8192x1024,4096x8192,4096x2048
FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "$(lim 150)" \
  python3 benchmarks/bench_gemm.py --shapes "$D" --m 1,2,4,8,16,32,64 \
  --schemes block128,per_tensor --backends cublaslt,untuned --precompile \
  --replays 10 --rounds 3 --json "$O/untuned_deepseek.json" > "$O/untuned_deepseek.log" 2>&1
echo "untuned deepseek rc=$? left=$(left)" | tee -a "$O/status.txt"
grep -A20 "slower than" "$O/untuned_deepseek.log" | head -20
timeout "$(lim 260)" python3 -m pytest -q -m gpu -p no:cacheprovider $(pytest_par 12 200) -rfE \
  --tb=short > "$O/suite.log" 2>&1
echo "gpu suite rc=$? left=$(left)" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/suite.log" | tail -15
