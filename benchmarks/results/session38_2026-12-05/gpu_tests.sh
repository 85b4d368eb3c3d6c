#!/usr/bin/env bash
# Session 38: the GPU test suite (pytest -m gpu, xdist over 14 workers) on this tree, after
# session 37's five audits and this session's changes. Carry [".gpu/run"].
#   OUT=$OUT bash benchmarks/results/session38_2026-12-05/gpu_tests.sh
set -uo pipefail
O=${OUT:-out}/gpu_tests
mkdir -p "$O" .gpu/run/cache
tar xJf .gpu/run/prebuilt.tar.xz -C .gpu/run/cache
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/gt
rm -rf /tmp/gt && mkdir -p /tmp/gt && cp -r .gpu/run/cache/. /tmp/gt/
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
s0=$(date +%s)
timeout ${LIMIT:-540} python3 -m pytest -q -m gpu -p no:cacheprovider -n 14 --timeout 150 -rfE \
  --durations=25 tests ${IGNORE:---ignore tests/test_nonfinite.py} > "$O/pytest.log" 2>&1
echo "pytest rc=$? s=$(( $(date +%s) - s0 ))" | tee -a "$O/status.txt"
tail -40 "$O/pytest.log"
tar czf "${OUT:-out}/gpu_tests.tgz" -C "${OUT:-out}" gpu_tests
