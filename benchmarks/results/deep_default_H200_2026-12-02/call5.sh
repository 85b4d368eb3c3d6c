#!/usr/bin/env bash
# Session 19, device call 5: a second run of the cells where call 3 saw the Triton default
# and cuBLASLt close at M = 32 / 64 (per_tensor, block128: the untuned rule's cuBLASLt side),
# the Triton default ("nodeep": the same at M >= 32) against cuBLASLt, two runs.
set -uo pipefail
OUT=${OUT:-out}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
SHAPES=6144x4096,4096x4096,1024x4096,28672x4096,4096x14336,24576x4096,4096x12288,10240x5120
SHAPES=$SHAPES,5120x8192,51200x5120,5120x25600,10240x8192,8192x8192,57344x8192,8192x28672
SHAPES=$SHAPES,1280x8192,8192x1024,7168x8192,8192x3584,5120x2048,2048x4096
SHAPES=$SHAPES,16384x5120,14336x5120,5120x6144,6144x5120,12288x5120,1024x5120,34816x5120,5120x17408
start=$(date +%s)
for run in 1 2; do
  timeout 150 python3 benchmarks/bench_gemm.py --shapes "$SHAPES" --m 32,64 \
    --schemes per_tensor,block128 --backends cublaslt,nodeep --precompile --replays 10 \
    --json "$OUT/m32_64_$run.json" > "$OUT/m32_64_$run.log" 2>&1
  echo "run $run rc=$? s=$(( $(date +%s) - start ))"
done
