#!/usr/bin/env bash
# Session 43's first device call. Carry .gpu/run/prebuilt.tar.xz and .gpu/run/whl
# (nvidia_cutlass, torchao, pytest_timeout, pytest_xdist, execnet). From the repository root:
#   OUT=$OUT bash benchmarks/results/session43_2026-12-05/call1.sh
# On an H200: session 39's next_h200.sh (#12's per_tensor tower, its M ratios, the paired
# trace), about 560 s. Else: `bench generate --compile` (new this session), Qwen3-8B-shaped at
# batch 1: does fp8tower still beat bf16 and torchao's float8 when every arm's decode step is
# torch.compile'd (torchao's float8 is meant to run compiled; its quantization is fused only
# there)? Eager rounds then time the compiled step; the graph column captures it.
set -uo pipefail
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "gpu: $GPU"
if echo "$GPU" | grep -q H200 && [ -z "${NO_H200:-}" ]; then
  OUT=$OUT bash benchmarks/results/session39_2026-12-05/next_h200.sh
else
  OUT=$OUT NAME=${NAME:-compile1} STEPS=generate BUDGET=${BUDGET:-570} GEN_BATCH=${GEN_BATCH:-1} \
    GEN_ARGS="--compile --rounds 3 --arms ${ARMS:-bf16,fp8:per_tensor:merged,torchao:per_row,torchao:per_tensor}" \
    bash benchmarks/results/session40_2026-12-05/call.sh
  tail -30 "$OUT/${NAME:-compile1}/generate.log"
fi
