#!/usr/bin/env bash
# NOT RUN (session 43: no machine came). Session 43's second device call (after call1 found
# a torch.compile'd fp8 step 4.2x bf16's time without a CUDA graph: the compiled op resolved
# its backend on every call). Carry
# .gpu/run/prebuilt.tar.xz and .gpu/run/whl. From the repository root:
#   OUT=$OUT bash benchmarks/results/session43_2026-12-05/call2.sh
# 1. the compiled op's GPU tests (test_gpu's torch.compile cases), with the op's launch
#    plans;
# 2. `bench generate --compile` again, Qwen3-8B-shaped, batch 1: bf16, merged per_tensor,
#    block128 (the compiled op now plans as Fp8Linear's eager path does).
set -uo pipefail
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
O=$OUT/gputests
mkdir -p "$O" .gpu/run/cache
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider -n 4 --timeout 90 -rfE \
  tests/test_gpu.py tests/test_gpu_plan.py -k "compile" > "$O/pytest.log" 2>&1
echo "gpu tests rc=$?" | tee -a "$O/status.txt"
tail -3 "$O/pytest.log"
OUT=$OUT NAME=compile2 STEPS=generate BUDGET=330 GEN_BATCH=1 \
  GEN_ARGS="--compile --rounds 3 --arms ${ARMS:-bf16,fp8:per_tensor:merged,fp8:block128}" \
  bash benchmarks/results/session40_2026-12-05/call.sh
tail -22 "$OUT/compile2/generate.log"
