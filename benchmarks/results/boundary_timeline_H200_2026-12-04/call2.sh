#!/usr/bin/env bash
# NOT RUN YET (prepared in session 30). The whole GPU test suite with every optional backend in
# one call: since the session folders' tuning caches are gzipped (tracked files 31.1 MiB), the
# wheels of pytest, pytest-xdist, pytest-timeout, nvidia-cutlass, the cuDNN frontend and torchao
# (23 MB, in .gpu/run/whl, carried: [".gpu"]) travel together. Session 29 had to split this in
# two calls and did not print why its 45 tests were skipped: -rs prints each reason here.
#   OUT=$OUT bash benchmarks/results/boundary_timeline_H200_2026-12-04/call2.sh
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call2
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
python3 -c "import pytest, xdist, cutlass_library, cudnn, torchao; print('pytest', pytest.__version__, 'cudnn', cudnn.backend_version(), 'torchao', torchao.__version__)" > "$O/versions.txt" 2>&1
cat "$O/versions.txt"
timeout 540 python3 -m pytest -q -m gpu -p no:cacheprovider -n 14 --timeout 240 -rfEs tests 2>&1 | tee "$O/tests.log" | tail -60
echo "tests rc=${PIPESTATUS[0]}"
tar czf "$FINAL/call2.tgz" -C "$FINAL" call2
