#!/usr/bin/env bash
# Session 21, device call 7 (the final tree): every priority config (wide_in_gemm from M = 8)
# against the reference at M = 8, 13, 32, 33 on the GPU.
set -uo pipefail
FINAL=${OUT:-out}
mkdir -p "$FINAL"
. benchmarks/device_wheels.sh
install_wheels .gpu/run /tmp/status.txt
PYTHONPATH=$PWD/src:/tmp/site timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 14 \
  --timeout 120 tests/test_gpu.py -k priority > "$FINAL/call7_tests.log" 2>&1
echo "tests rc=$?"; tail -3 "$FINAL/call7_tests.log"
