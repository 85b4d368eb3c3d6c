#!/usr/bin/env bash
# Session 29, device call 3: the whole GPU test suite on the current tree (the last whole run was
# session 8's; later sessions ran the files they touched). Wheels (pytest, xdist, timeout,
# nvidia-cutlass) travel in .gpu/run/whl; torchao and the cuDNN frontend do not fit (64 MiB).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call3
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
python3 -c "import pytest, xdist, cutlass_library; print("pytest", pytest.__version__)" > "$O/versions.txt" 2>&1
cat "$O/versions.txt"
timeout 540 python3 -m pytest -q -m gpu -p no:cacheprovider -n 14 --timeout 240 -rfE tests 2>&1 | tee "$O/tests.log" | tail -40
echo "tests rc=${PIPESTATUS[0]}"
tar czf "$FINAL/call3.tgz" -C "$FINAL" call3
