#!/usr/bin/env bash
# Session 44's third device call, after the op's warm-up fix (nn/ops.py _graph_pool_warmup /
# _off_pool): call2 found torch.compile(mode="reduce-overhead") refusing to record ("Detected
# N tensor(s) in the cudagraph pool not tracked as outputs"), every scheme, with and without
# an eager call first. 1. the compiled-op GPU tests again; 2. the whole GPU suite (-n 8).
# Carry .gpu/run/whl. OUT=$OUT bash benchmarks/results/session44_2026-12-06/call3.sh
set -uo pipefail
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
O=$OUT/gputests3
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
timeout 220 python3 -m pytest -q -m gpu -p no:cacheprovider -n 4 --timeout 150 -rfE \
  --tb=short tests/test_gpu.py tests/test_gpu_plan.py -k "compile" > "$O/compile.log" 2>&1
echo "compile tests rc=$?" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/compile.log" | tail -12
timeout ${SUITE_S:-300} python3 -m pytest -q -m gpu -p no:cacheprovider -n 8 --timeout 200 \
  -rfE --tb=short -k "not compile" > "$O/suite.log" 2>&1
echo "gpu suite rc=$?" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/suite.log" | tail -25
