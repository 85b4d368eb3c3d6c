#!/usr/bin/env bash
# Session 41's third device call (kind nvidia-h200; carry .gpu/run/prebuilt.tar.xz and the
# nvidia_cutlass wheel). From the repository root:
#   OUT=$OUT bash benchmarks/results/session41_2026-12-05/call3.sh
# On an H200: session 39's next_h200.sh (as call1.sh).
# On anything else: `bench generate` at batch 8 with bf16 and the four fp8tower arms,
# interleaved (call2: the eight default arms do not fit 80 GB at batch 8).
set -uo pipefail
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "gpu: $GPU"
if echo "$GPU" | grep -q H200; then
  OUT=$OUT bash benchmarks/results/session39_2026-12-05/next_h200.sh
else
  OUT=$OUT NAME=h100_gen8 STEPS=generate BUDGET=420 GEN_BATCH=8 \
    GEN_ARGS="--arms bf16,fp8:per_tensor,fp8:per_tensor:merged,fp8:channel_token,fp8:block128" \
    bash benchmarks/results/session40_2026-12-05/call.sh
fi
