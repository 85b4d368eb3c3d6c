#!/usr/bin/env bash
# Session 39's third call, by card: on an H100 the untuned rule measured there (call.sh's rule
# step) and the GPU suite; on an H200, #12's tower on session 37's cache with this tree
# (session 38's call.sh, step tower) and the suite.
#   OUT=$OUT bash benchmarks/results/session39_2026-12-05/call3.sh
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  OUT=$OUT NAME=call3_h200 STEPS=tower BUDGET=300 bash benchmarks/results/session38_2026-12-05/call.sh
  OUT=$OUT NAME=call3_suite STEPS=suite BUDGET=280 bash benchmarks/results/session39_2026-12-05/call.sh
else
  OUT=$OUT NAME=call3 STEPS=rule,suite BUDGET=585 bash benchmarks/results/session39_2026-12-05/call.sh
fi
