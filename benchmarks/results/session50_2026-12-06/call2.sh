#!/usr/bin/env bash
# Session 50's second device call (carry .gpu/run): the GPU tests of launch plans with this
# session's eager per_tensor twin (one launch where the choice is a pre-pass pair) and its
# fp32 x on fewer stages (tests/test_gpu_plan.py, test_eager_per_tensor_twin_of_the_deep_pair
# first), then the plan, linear and graph tests.
set -uo pipefail
O=$OUT/call2
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
unpack_prebuilt .gpu/run ~/.cache/fp8tower tests/.cache
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)" | tee -a "$O/status.txt"
timeout "${LIMIT:-80}" python3 -m pytest -q -p no:cacheprovider -rfE --tb=short \
  tests/test_gpu_plan.py -k "eager_per_tensor_twin" > "$O/twin.log" 2>&1
echo "twin tests rc=$?" | tee -a "$O/status.txt"
tail -3 "$O/twin.log"
timeout "${LIMIT2:-150}" python3 -m pytest -q -m gpu -p no:cacheprovider -rfE --tb=short \
  $(pytest_par 12 240) tests/test_gpu_plan.py tests/test_gpu.py > "$O/plan.log" 2>&1
echo "gpu plan tests rc=$?" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/plan.log" | tail -12
