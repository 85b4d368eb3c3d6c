#!/usr/bin/env bash
# Session 19, device call 6: the deep tile from the pre-pass pair on 64-80 tiles at M = 1-8:
# does M = 2-4 run like M = 8 (a win) or like M = 1 (a loss on the longer K)? Two runs.
set -uo pipefail
OUT=${OUT:-out}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
for run in 1 2; do
  timeout 120 python3 benchmarks/bench_gemm.py --shapes 5120x6144,4096x14336,5120x17408,4096x4096,5120x8192 \
    --m 1,2,3,4,8 --schemes per_tensor,channel_token --backends nodeep,deep --precompile --replays 10 \
    --json "$OUT/small_m_$run.json" > "$OUT/small_m_$run.log" 2>&1
  echo "run $run rc=$?"
done
