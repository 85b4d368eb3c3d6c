#!/usr/bin/env bash
# Session 51's third call (carry .gpu/run; an H100): the 133-159-tile band's new bound held
# out. configs.small_m_deep now serves the band at M = 2-8 with K <= 5120 (call1/band.json and
# session 50's edges.json: 10 shapes); here 11 band shapes with K <= 5120 not timed before (two
# of real models: Phi-3-mini's qkv_proj 9216x3072, Gemma-2-2B's gate / up 9216x2304),
# M = 1, 2, 4, 8: cuBLASLt, untuned (the H100's, the new bound), rule (the shared default);
# then the plan and GPU-dispatch tests with what is left.
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-300}"
O=$OUT/call3
mkdir -p "$O"
install_wheels .gpu/run "$O/status.txt"
unpack_prebuilt .gpu/run /tmp/un ~/.cache/fp8tower tests/.cache
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name --format=csv,noheader | head -1 | tee -a "$O/status.txt"
S=9216x3072,9216x2304,8512x4096,8640x3072,9088x5120,9600x4096,9856x5120,10048x2560
S=$S,10176x4096,9344x2048,8768x3840
bench_untuned "$O" heldout 90 --shapes "$S" --m 1,2,4,8 --schemes per_tensor \
  --backends cublaslt,untuned,rule
timeout -k 10 "$(lim 150)" python3 -m pytest -q -m gpu -p no:cacheprovider -rfE --tb=short \
  $(pytest_par 12 120) tests/test_gpu_plan.py tests/test_gpu.py > "$O/plan.log" 2>&1
echo "plan tests rc=$? left=$(left)" | tee -a "$O/status.txt"
grep -E "^(FAILED|ERROR)|passed|failed" "$O/plan.log" | tail -12
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
