#!/usr/bin/env bash
# Session 19, device call 2: call 1 again on the shapes of 64-132 tiles of BLOCK_N 64 and the
# largest, with the deep tile also in the default's own x mode ("deep_own": per_tensor's x
# quantized in the GEMM, channel_token's fused amax at M = 1), two runs (run order effects).
set -uo pipefail
OUT=${OUT:-out}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
SHAPES=6144x4096,4096x4096,4096x14336,4096x12288,5120x8192,8192x8192,57344x8192,8192x28672
SHAPES=$SHAPES,8192x1024,7168x8192,8192x3584,5120x2048,5120x6144,6144x5120,34816x5120,5120x17408
SHAPES=$SHAPES,51200x5120,28672x4096
for run in 1 2; do
  start=$(date +%s)
  timeout 240 python3 benchmarks/bench_gemm.py --shapes "$SHAPES" --m 1,8,16 \
    --schemes per_tensor,channel_token --backends cublaslt,triton,pair,deep,deep_own --precompile \
    --replays 10 --json "$OUT/deep_own_$run.json" > "$OUT/deep_own_$run.log" 2>&1
  echo "bench $run rc=$? s=$(( $(date +%s) - start ))"
done
grep -E "read ceiling|precompile|wrote" "$OUT"/deep_own_*.log
