#!/usr/bin/env bash
# NOT RUN (prepared in session 39, when every call got an H100): for the next call that gets an
# H200. Carry [".gpu/run/prebuilt.tar.xz", ".gpu/run/whl/nvidia_cutlass-4.2.0.0-py3-none-any.whl"]
# (the whole .gpu/run, 24 MB, with the 43 MB tracked tree passes the device's 64 MiB).
# From the repository root: OUT=$OUT bash benchmarks/results/session39_2026-12-05/next_h200.sh
# 1. rows and rows_fp8 each tuned in its own step on the H200 (session 38's call.sh, ab2:
#    from session 37's H200 cache, per_tensor, M = 1, 8, 16, 32), the two towers alternated:
#    #12's per_tensor M = 1 step with the producer-fused stand-in, and its M ratios;
# 2. the paired trace of both (us a call beyond the bytes: #12's 2 us);
# 3. the H100 rule's deferred cells on the H200 (losers): do its deferrals hold there?
set -uo pipefail
S=benchmarks/results/session39_2026-12-05
if ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "not an H200: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 2
fi
OUT=$OUT NAME=h200_ab STEPS=ab2 AB_M=1,8,16,32 BUDGET=330 bash benchmarks/results/session38_2026-12-05/call.sh
OUT=$OUT NAME=h200_more STEPS=losers,traces BUDGET=230 \
  TRACE_ROWS_CACHE=$OUT/h200_ab/cache_rows.json TRACE_FP8_CACHE=$OUT/h200_ab/cache_rows_fp8.json \
  bash $S/call.sh
