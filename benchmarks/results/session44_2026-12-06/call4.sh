#!/usr/bin/env bash
# Session 44's fourth device call: call3 found the helper thread's output refused by the
# warm-up ("These storage data ptrs are not allocated in pool"): the output is now cloned on
# the caller's thread. The compiled-op GPU tests only. Carry .gpu/run/whl.
set -uo pipefail
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
O=$OUT/gputests4
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider -n 5 --timeout 150 -rfE \
  --tb=short tests/test_gpu.py tests/test_gpu_plan.py -k "compile" > "$O/compile.log" 2>&1
echo "compile tests rc=$?" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/compile.log" | tail -12
