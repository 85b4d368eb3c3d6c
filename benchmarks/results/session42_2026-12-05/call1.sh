#!/usr/bin/env bash
# NOT RUN (prepared in session 42, when no device machine was lent): the next session's first
# device call. Carry .gpu/run/prebuilt.tar.xz and the wheels under .gpu/run/whl
# (nvidia_cutlass, torchao, pytest_timeout, pytest_xdist, execnet). From the repository root:
#   OUT=$OUT bash benchmarks/results/session42_2026-12-05/call1.sh
# On an H200: session 39's next_h200.sh (#12's per_tensor tower with both stand-ins, its M
# ratios, the paired trace, the H100 rule's deferrals on the H200), about 560 s.
# On anything else: the GPU suite with session 42's changes (one act_scale check, the
# compressed-tensors group rule, capture bytes with a bias; about 200 s on 10 workers), then
# `bench generate` at batch 8 with four arms, never measured on an H100 (eight do not fit
# 80 GB interleaved at batch 8: session 41's call2).
set -uo pipefail
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "gpu: $GPU"
if echo "$GPU" | grep -q H200; then
  OUT=$OUT bash benchmarks/results/session39_2026-12-05/next_h200.sh
else
  # call.sh runs generate before the suite: two calls, the suite first
  OUT=$OUT NAME=h100_suite STEPS=suite BUDGET=240 bash benchmarks/results/session40_2026-12-05/call.sh
  OUT=$OUT NAME=h100_gen8 STEPS=generate BUDGET=320 GEN_BATCH=8 \
    GEN_ARGS="--arms bf16,fp8:per_tensor,fp8:per_tensor:merged,torchao:per_tensor" \
    bash benchmarks/results/session40_2026-12-05/call.sh
fi
