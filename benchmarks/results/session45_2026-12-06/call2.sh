#!/usr/bin/env bash
# Session 45's second call, on call1's warm H100 (carry .gpu/run/whl): the reduce-overhead
# tests again with more time (call1 cut them at 150 s, 7 passed, none failed: each compiles a
# model), then the GPU tests of what call1's suite did not reach for sure: AutoFP8's
# checkpoints on the GPU backends and the cuBLASLt paths.
set -uo pipefail
O=$OUT/call2
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider -n 4 --timeout 55 -rfE --tb=short \
  tests/checkpoint/test_per_tensor_fp8.py tests/test_gpu_plan.py tests/test_gpu.py \
  -k "per_tensor_fp8 or both_activation or cublaslt" > "$O/focus.log" 2>&1
echo "focus rc=$?" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/focus.log" | tail -12
timeout 250 python3 -m pytest -q -m gpu -p no:cacheprovider -n 10 --timeout 240 -rfE \
  --tb=short tests/test_gpu.py -k "reduce_overhead or reduce-overhead" > "$O/compile.log" 2>&1
echo "reduce-overhead tests rc=$?" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/compile.log" | tail -12
