#!/usr/bin/env bash
# Session 41's fourth device call (kind nvidia-h100-x1, after call3's machine stopped
# answering, with 407 s left, and again at the end with 347 s and BUDGET 195: no machine
# started either time; carry .gpu/run/prebuilt.tar.xz): `bench
# generate` at batch 8, bf16 and merged per_tensor only, interleaved. From the repository root:
#   OUT=$OUT bash benchmarks/results/session41_2026-12-05/call4.sh
set -uo pipefail
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)"
OUT=$OUT NAME=h100_gen8 STEPS=generate BUDGET=195 GEN_BATCH=8 \
  GEN_ARGS="--arms bf16,fp8:per_tensor:merged" \
  bash benchmarks/results/session40_2026-12-05/call.sh
