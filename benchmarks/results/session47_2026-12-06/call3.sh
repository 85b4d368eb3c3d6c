#!/usr/bin/env bash
# Session 47's third call (warm H100, what was left of the device time): the DeepSeek-V4
# tower (deepseek_v4_config.json here: transformers' V4-Flash-shaped defaults), merged,
# cuBLASLt against auto, per_tensor and block128 at M = 1 / 8; then the plan and cuBLASLt GPU
# tests with the time left (call1's 90 s limit cut them off while passing).
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-420}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local l=$(( $(left) - 5 )); [ "$l" -lt 1 ] && l=1; [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
O=$OUT/call3
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
[ -f .gpu/run/prebuilt.tar.xz ] && mkdir -p ~/.cache/fp8tower && \
  tar xJf .gpu/run/prebuilt.tar.xz -C ~/.cache/fp8tower
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
C=benchmarks/results/session47_2026-12-06/deepseek_v4_config.json
for s in per_tensor block128; do
  timeout "$(lim 110)" python3 -m fp8tower bench tower --model $C --arms merged \
    --backends cublaslt,auto --scheme $s --m 1,8 --rounds 2 \
    --json "$O/tower_deepseek_v4_$s.json" > "$O/tower_deepseek_v4_$s.log" 2>&1
  echo "deepseek-v4 tower $s rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "│ (block128|per_tensor)" "$O/tower_deepseek_v4_$s.log" | head -4
done
timeout "$(lim 200)" python3 -m pytest -q -m gpu -p no:cacheprovider $(pytest_par 8 150) -rfE \
  --tb=short tests/test_gpu_plan.py tests/test_gpu.py -k "plan or cublaslt" > "$O/plan.log" 2>&1
echo "plan tests rc=$? left=$(left)" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/plan.log" | tail -8
