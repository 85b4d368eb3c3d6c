#!/usr/bin/env bash
# Session 36, call 1: session 31's out_proj-tile A/B (boundary_timeline_H200_2026-12-04/
# call3.sh: tiles small enough that the next GEMM's programs sit beside the current one's),
# never run before; then its timeline of the first pair. Carry [".gpu/run"].
#   OUT=$OUT bash benchmarks/results/session36_H200_2026-12-05/call1.sh
set -uo pipefail
FINAL=${OUT:-out}
. benchmarks/device_wheels.sh
mkdir -p "$FINAL"
install_wheels .gpu/run "$FINAL/status.txt"
OUT=$FINAL bash benchmarks/results/boundary_timeline_H200_2026-12-04/call3.sh
