#!/usr/bin/env bash
# Session 39, call 6 (carry [".gpu/run/prebuilt.tar.xz"]; run as one command line, here as a file):
# is block128 8192x29568's loss at M = 64 (call5, 0.949x) its K ending on half a BLOCK_K step?
# Neighbouring K of whole and half 256-steps, two other N, the three W8A8 schemes, M = 16-64.
mkdir -p $OUT/call6 .gpu/run/cache && tar xJf .gpu/run/prebuilt.tar.xz -C .gpu/run/cache
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0
mkdir -p /tmp/un && nvidia-smi --query-gpu=name --format=csv > $OUT/call6/gpu.txt
timeout 200 python3 benchmarks/bench_gemm.py \
  --shapes 8192x29568,8192x29440,8192x29696,8192x29312,5120x29568,10240x29568,8192x28672 \
  --m 16,32,64 --schemes block128,channel_token,per_tensor --backends cublaslt,untuned,rule \
  --precompile --replays 10 --json $OUT/call6/kstep.json > $OUT/call6/kstep.log 2>&1
echo rc=$?
grep -A30 "slower than" $OUT/call6/kstep.log | head -30
