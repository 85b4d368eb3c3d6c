#!/usr/bin/env bash
# Session 44's first device call. Carry .gpu/run/prebuilt.tar.xz and .gpu/run/whl. From the
# repository root:  OUT=$OUT bash benchmarks/results/session44_2026-12-06/call1.sh
# On an H200: session 39's next_h200.sh (#12's per_tensor tower, its M ratios, the paired
# trace), about 560 s. Else: session 43's call2.sh (the compiled op's GPU tests, then
# `bench generate --compile` with the op's launch plans), about 450 s.
set -uo pipefail
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "gpu: $GPU"
if echo "$GPU" | grep -q H200 && [ -z "${NO_H200:-}" ]; then
  OUT=$OUT bash benchmarks/results/session39_2026-12-05/next_h200.sh
else
  OUT=$OUT bash benchmarks/results/session43_2026-12-05/call2.sh
fi
