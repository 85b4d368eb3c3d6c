#!/usr/bin/env bash
# Session 19, device call 1 (run from the repository root on the GPU machine): per GEMM, the
# untuned Triton default against the same tile from the PDL pre-pass pair ("pair") and the
# default's BLOCK_N unsplit at BLOCK_K 512 ("deep"), with cuBLASLt, on other families' shapes
# and the 27B tower's, per_tensor and channel_token at M = 1, 8, 16 (bench_gemm.py).
set -uo pipefail
OUT=${OUT:-out}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
SHAPES=6144x4096,4096x4096,1024x4096,28672x4096,4096x14336,24576x4096,4096x12288,10240x5120
SHAPES=$SHAPES,5120x8192,51200x5120,5120x25600,10240x8192,8192x8192,57344x8192,8192x28672
SHAPES=$SHAPES,1280x8192,8192x1024,7168x8192,8192x3584,5120x2048,2048x4096
SHAPES=$SHAPES,16384x5120,14336x5120,5120x6144,6144x5120,12288x5120,1024x5120,34816x5120,5120x17408
start=$(date +%s)
timeout 480 python3 benchmarks/bench_gemm.py --shapes "$SHAPES" --m 1,8,16 \
  --schemes per_tensor,channel_token --backends cublaslt,triton,pair,deep --precompile \
  --replays 10 --json "$OUT/deep.json" > "$OUT/deep.log" 2>&1
echo "bench rc=$? s=$(( $(date +%s) - start ))"
grep -E "read ceiling|precompile|done at|wrote" "$OUT/deep.log"
