#!/usr/bin/env bash
# Session 42's third device call (an H100; carry .gpu/run/whl): the checkpoint tests with the
# device's transformers (5.17; the CPU's is 5.25), this session's save / MoE-loading code
# among them, and the new GPU round trip (weights on the GPU, auto dispatch).
#   OUT=$OUT bash benchmarks/results/session42_2026-12-05/call3.sh
set -uo pipefail
O=$OUT/checkpoint_tests
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
python3 -c "import transformers, torch; print('transformers', transformers.__version__, 'torch', torch.__version__)" | tee -a "$O/status.txt"
FP8TOWER_CACHE_DIR=/tmp/ck timeout 300 python3 -m pytest -q -p no:cacheprovider -n 12 \
  --timeout 200 -rfE tests/checkpoint tests/test_generate.py tests/test_hf_capture.py \
  tests/test_cli_audit5.py > "$O/pytest.log" 2>&1
echo "pytest rc=$?" | tee -a "$O/status.txt"
tail -15 "$O/pytest.log"
