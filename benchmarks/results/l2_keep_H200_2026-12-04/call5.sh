#!/usr/bin/env bash
# Session 29, device call 5: the GPU tests of the optional backends whose wheels did not fit in
# call 3 (the cuDNN frontend, torchao), now that the results JSON is compact; skip reasons printed.
# Wheels in .gpu/run/whl: pytest, pytest-xdist, pytest-timeout, nvidia-cudnn-frontend, torchao
# (nvidia-cutlass left out: it ran in call 3, and all of them do not fit at once).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call5
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
python3 -c "import cudnn, torchao; print('cudnn', cudnn.backend_version(), 'torchao', torchao.__version__)
from fp8tower import backends; print('available', [b.name for b in backends.available()])" > "$O/versions.txt" 2>&1
cat "$O/versions.txt"
timeout 480 python3 -m pytest -q -m gpu -p no:cacheprovider -n 14 --timeout 240 -rfEs \
  tests/test_gpu.py tests/test_backend_cudnn.py tests/test_generate.py tests/test_tuning.py \
  tests/trace/test_trace_attribute.py 2>&1 | tee "$O/tests.log" | grep -v PytestBenchmarkWarning | tail -40
echo "tests rc=${PIPESTATUS[0]}"
tar czf "$FINAL/call5.tgz" -C "$FINAL" call5
