#!/usr/bin/env bash
# Session 44's second device call: call1's compiled-op GPU tests were cut at 100 s with 7 of
# 8 finished failing (no summary). The same tests, one process, full tracebacks, longer.
# Carry .gpu/run/whl. OUT=$OUT bash benchmarks/results/session44_2026-12-06/call2.sh
set -uo pipefail
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
O=$OUT/gputests2
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
timeout ${T:-400} python3 -m pytest -q -m gpu -p no:cacheprovider --timeout 150 -rfE \
  --tb=short tests/test_gpu.py tests/test_gpu_plan.py -k "compile" > "$O/pytest.log" 2>&1
echo "gpu tests rc=$?" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/pytest.log" | tail -20
