#!/usr/bin/env bash
# Session 65, any GPU (carry .gpu/run): a CUDA graph now runs the fastest GPU time of a tie,
# eager calls the cheapest host path (dispatch's two choices). First the GPU tests of launch
# plans (tests/test_gpu_plan.py: test_a_cuda_graph_runs_its_own_choice_of_a_cached_tie is
# new), then the whole GPU suite within what is left of BUDGET (the change moves every
# eager-only plan's warm-up and every captured call's dispatch).
# Outputs: DIR (default call1)/status.txt, plan.log, suite.log.
#   BUDGET=420 OUT=$OUT bash benchmarks/results/session65_2026-12-07/call1.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-420}"
O=$OUT/${DIR:-call1}
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
# a cache dir without the prebuilt CUTLASS libraries builds them with nvcc while tuning:
# the first two runs of this call timed out so, on four tests that tune auto from cold
cold_cache .gpu/run /tmp/plan_tests
FP8TOWER_CACHE_DIR=/tmp/plan_tests timeout -k 10 "$(lim 240)" python3 -m pytest -q -m gpu \
  -p no:cacheprovider $(pytest_par 12 240) -rfE --tb=short tests/test_gpu_plan.py \
  > "$O/plan.log" 2>&1
echo "plan tests rc=$? left=$(left)" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/plan.log" | tail -8
gpu_suite_with_left "$O"
