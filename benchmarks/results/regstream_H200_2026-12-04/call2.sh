#!/usr/bin/env bash
# Session 24, device call 2: one Triton config (the tuned M = 1 config of 10240x5120 / 16384x5120)
# over shapes of growing N and K, with and without PDL, and cuBLASLt, in the tuner's chain: the
# slope (us per MB: the body's bandwidth) and intercept (the fixed cost a GEMM) of a linear fit.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call2
mkdir -p "$O"
start=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c24s2
mkdir -p /tmp/c24s2
CFG="block_n=64,block_k=256,split_k=1,num_warps=4,num_stages=4,prequant=true"
timeout 300 python3 benchmarks/bench_gemm.py --schemes per_tensor --m 1,8 --replays 10 \
  --shapes 2560x5120,5120x5120,10240x5120,20480x5120,40960x5120,5120x3072,5120x6144,5120x12288,5120x24576 \
  --backends "cublaslt,triton[$CFG,pdl=true,prefetch=1],triton[$CFG,pdl=false,prefetch=0]" \
  --json "$O/fit.json" > "$O/fit.log" 2>&1
echo "fit rc=$? s=$(( $(date +%s) - start ))"
tail -60 "$O/fit.log"
tar czf "$FINAL/call2.tgz" -C "$FINAL" call2
