#!/usr/bin/env bash
# The next session's first device call (any card; carry .gpu/run/whl). Session 45 fixed the
# launch plans' copy of the cuBLASLt glue after its last GPU call: measure it, then re-judge
# the untuned rule against the lean cuBLASLt. Steps under what is left of BUDGET (s):
# 1. the GPU suite's plan and cuBLASLt tests (the plan fix's first GPU run);
# 2. the 27B tower's merged cuBLASLt arms, block128 and per_tensor, M = 1 / 8 / 16 / 32, with
#    auto beside them (the tower's "vs merged cuBLASLt" against the lean baseline; session
#    45's call4 and session 38 had block128's cuBLASLt M = 1 16% slower than its M = 16);
# 3. untuned against cuBLASLt on session 39's 29 shapes x M = 1-64, all three W8A8 schemes
#    (on an H200: the H200's rule, never checked against the lean cuBLASLt);
# 4. the whole GPU suite.
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-570}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local l=$(( $(left) - 5 )); [ "$l" -lt 1 ] && l=1; [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
O=$OUT/next
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
timeout "$(lim 90)" python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 --timeout 80 -rfE \
  --tb=short tests/test_gpu_plan.py tests/test_gpu.py -k "plan or cublaslt" > "$O/plan.log" 2>&1
echo "plan tests rc=$? left=$(left)" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/plan.log" | tail -8
for s in block128 per_tensor; do
  timeout "$(lim 150)" python3 -m fp8tower bench tower --model qwen3.5-27b --arms merged \
    --backends cublaslt,auto --scheme $s --m 1,8,16,32 --rounds 2 \
    --json "$O/tower_$s.json" > "$O/tower_$s.log" 2>&1
  echo "tower $s rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "│ (block128|per_tensor)" "$O/tower_$s.log" | head -8
done
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
timeout "$(lim 260)" python3 -m pytest -q -m gpu -p no:cacheprovider -n 12 --timeout 200 -rfE \
  --tb=short > "$O/suite.log" 2>&1
echo "gpu suite rc=$? left=$(left)" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/suite.log" | tail -15
