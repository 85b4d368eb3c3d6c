#!/usr/bin/env bash
# Session 46's next.sh, run in session 47 (session 46 had no device time). Any card; carry
# .gpu/run (the wheels, the prebuilt CUTLASS libraries). Steps under what is left of BUDGET (s):
# 1. the GPU suite's plan and cuBLASLt tests (the plan fix's first GPU run);
# 2. the 27B tower's merged cuBLASLt arms, block128 and per_tensor, M = 1 / 8 / 16 / 32, with
#    auto beside them (the tower's "vs merged cuBLASLt" against the lean baseline; session
#    45's call4 and session 38 had block128's cuBLASLt M = 1 16% slower than its M = 16);
# 3. the DeepSeek-V3 tower (MLA attention, 10.4 GB a step), merged, M = 1 / 8: per_tensor
#    cuBLASLt and auto, block128 auto (its shapes were never timed: 2112x7168, 24576x1536,
#    7168x16384).
# call2.sh: untuned against the lean cuBLASLt on 29 shapes x 3 schemes, then the GPU suite.
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-570}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local l=$(( $(left) - 5 )); [ "$l" -lt 1 ] && l=1; [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
O=$OUT/call1
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
# the tuner's CUTLASS libraries, built on the CPU machine (benchmarks/prebuild_cutlass.py)
if [ -f .gpu/run/prebuilt.tar.xz ]; then
  mkdir -p ~/.cache/fp8tower && tar xJf .gpu/run/prebuilt.tar.xz -C ~/.cache/fp8tower
else
  echo "no .gpu/run/prebuilt.tar.xz: the tuner builds its CUTLASS libraries here" \
    | tee -a "$O/status.txt"
fi
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
timeout "$(lim 90)" python3 -m pytest -q -m gpu -p no:cacheprovider $(pytest_par 8 80) -rfE \
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
# cuBLASLt's block128 needs N a multiple of 128 (kv_a's 576, the merged 2112 are not): its
# rows are unservable there, so block128 runs auto alone and per_tensor gives the ratio
for s in per_tensor block128; do
  b=cublaslt,auto; [ $s = block128 ] && b=auto
  timeout "$(lim 120)" python3 -m fp8tower bench tower --model deepseek-v3 --arms merged \
    --backends $b --scheme $s --m 1,8 --rounds 2 \
    --json "$O/tower_deepseek_v3_$s.json" > "$O/tower_deepseek_v3_$s.log" 2>&1
  echo "deepseek-v3 tower $s rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "│ (block128|per_tensor)" "$O/tower_deepseek_v3_$s.log" | head -8
done
