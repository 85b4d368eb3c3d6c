#!/usr/bin/env bash
# Session 41's second device call (kind nvidia-h200; carry .gpu/run/prebuilt.tar.xz and the
# nvidia_cutlass, torchao, pytest_timeout, pytest_xdist and execnet wheels under
# .gpu/run/whl). From the repository root:
#   OUT=$OUT bash benchmarks/results/session41_2026-12-05/call2.sh
# On an H200: session 39's next_h200.sh (as call1.sh).
# On anything else: `bench generate`'s default arms at batch 8, interleaved (call1 ran batch
# 1), then the GPU suite on this session's code (the numerics audit's fixes: Fp8Weight's
# reassigned fields, checked act_scale values); call.sh runs its steps in that order.
set -uo pipefail
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "gpu: $GPU"
if echo "$GPU" | grep -q H200; then
  OUT=$OUT bash benchmarks/results/session39_2026-12-05/next_h200.sh
else
  OUT=$OUT NAME=h100_suite_gen STEPS=suite,generate BUDGET=565 GEN_BATCH=8 \
    bash benchmarks/results/session40_2026-12-05/call.sh
fi
