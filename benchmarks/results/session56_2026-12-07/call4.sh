#!/usr/bin/env bash
# Session 56's fourth device call (carry .gpu/run; calls 1-2 never started): on an H200,
# session 54's call10.sh (the per-GEMM scorecard, then the per_tensor tower and its paired
# traces); on any other card the GPU suite on this tree (the tuner's neighbours, session 54,
# had not run it).
#   BUDGET=560 OUT=$OUT bash benchmarks/results/session56_2026-12-07/call4.sh
set -uo pipefail
. benchmarks/device_wheels.sh
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
case "$GPU" in
  *H200*) exec bash benchmarks/results/session54_2026-12-06/call10.sh ;;
esac
budget_start "${BUDGET:-560}"
O=$OUT/c2  # (c2 as it ran; its files are in call4/)
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
gpu_suite_with_left "$O"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
