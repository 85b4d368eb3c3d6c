#!/usr/bin/env bash
# Session 47's fourth call (one command line, warm H100, carry .gpu/run): the plan test that
# call3 cut at 150 s (the tuner building a CUTLASS library beside seven workers), alone.
set -uo pipefail
mkdir -p "$OUT/call4"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$OUT/call4/status.txt" > /dev/null 2>&1
mkdir -p ~/.cache/fp8tower && tar xJf .gpu/run/prebuilt.tar.xz -C ~/.cache/fp8tower
PYTHONPATH=$PWD/src:/tmp/site timeout 165 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE \
  --tb=short tests/test_gpu_plan.py -k "captured_buffers_survive" > "$OUT/call4/plan.log" 2>&1
echo "rc=$?" | tee -a "$OUT/call4/status.txt"
tail -3 "$OUT/call4/plan.log"
