#!/usr/bin/env bash
# Session 42's second device call (an H100; carry .gpu/run/prebuilt.tar.xz and .gpu/run/whl).
# From the repository root: OUT=$OUT bash benchmarks/results/session42_2026-12-05/call2.sh
# 1. `bench generate` at batch 8 with the arms call1 left out (channel_token, block128,
#    torchao's per-row float8), beside bf16 again: the batch-8 table of every default arm
#    that runs there, in two runs of four (eight do not fit 80 GB interleaved at batch 8);
# 2. session 41's open question: block128's eager time / bf16 at batch 1 was 1.145 in a run
#    holding seven models (1.002 in session 40's five-arm run): bf16 and block128 alone, 7
#    rounds.
set -uo pipefail
S=benchmarks/results/session40_2026-12-05/call.sh
OUT=$OUT NAME=h100_gen8b STEPS=generate BUDGET=200 GEN_BATCH=8 \
  GEN_ARGS="--arms bf16,fp8:channel_token,fp8:block128,torchao:per_row" bash $S
OUT=$OUT NAME=h100_gen1_b128 STEPS=generate BUDGET=200 GEN_BATCH=1 \
  GEN_ARGS="--arms bf16,fp8:block128 --rounds 7" bash $S
