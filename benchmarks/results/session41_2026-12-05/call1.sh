#!/usr/bin/env bash
# Session 41's first device call (kind nvidia-h200; carry .gpu/run/prebuilt.tar.xz and the
# nvidia_cutlass and torchao wheels under .gpu/run/whl). From the repository root:
#   OUT=$OUT bash benchmarks/results/session41_2026-12-05/call1.sh
# On an H200: session 39's next_h200.sh (#12's per_tensor tower with both stand-ins, its M
# ratios, the paired trace, the H100 rule's deferrals on the H200).
# On anything else: session 40's open question, whether `bench generate`'s eight default
# arms fit one 80 GB card interleaved (batch 1, Qwen3-8B-shaped, context 512).
set -uo pipefail
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "gpu: $GPU"
if echo "$GPU" | grep -q H200; then
  OUT=$OUT bash benchmarks/results/session39_2026-12-05/next_h200.sh
else
  OUT=$OUT NAME=h100_gen STEPS=generate BUDGET=560 GEN_BATCH=1 \
    bash benchmarks/results/session40_2026-12-05/call.sh
fi
