#!/usr/bin/env bash
# Session 44's sixth device call, after a review: a launch plan kept its first call's x (and
# y), which under reduce-overhead is an activation in the graph's pool when the linear's x is
# made inside the graph; plans now keep neither (nn/plan.py DirectLaunch). The reduce-overhead
# GPU tests, the new one now with x made inside the graph. Carry .gpu/run/whl.
set -uo pipefail
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
O=$OUT/gputests6
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 9 --timeout 180 -rfE \
  --tb=short tests/test_gpu.py -k "reduce_overhead or reduce-overhead" > "$O/compile.log" 2>&1
echo "reduce-overhead tests rc=$?" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/compile.log" | tail -12
