#!/usr/bin/env bash
# Session 28, device call 5: BLOCK_N 32 unsplit (Triton builds it on mma.sync, W and x
# converted to fp16 in registers) with PDL, per_tensor, against the tuned choice: twice the
# programs of BLOCK_N 64 on the N = 5120 shapes (160 against 80 on 132 SMs).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call5
R=benchmarks/results/wfirst_H200_2026-12-04
mkdir -p "$O" /tmp/c5
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c5 FP8TOWER_TUNE=0
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c5 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
T="split_k=1,prequant=true,pdl=true,prefetch=1"
timeout 400 python3 benchmarks/bench_gemm.py --shapes 5120x6144,5120x17408,6144x5120,10240x5120,16384x5120 --m 1,8,16 \
  --schemes per_tensor --precompile \
  --backends "auto,triton[block_n=32,block_k=512,num_stages=4,num_warps=4,$T],triton[block_n=32,block_k=512,num_stages=6,num_warps=4,$T],triton[block_n=32,block_k=1024,num_stages=3,num_warps=4,$T],triton[block_n=32,block_k=512,num_stages=4,num_warps=2,$T]" \
  --json "$O/gemm_bn32.json" > "$O/gemm_bn32.log" 2>&1
echo "gemm rc=$?"
python3 $R/summary.py "$O/gemm_bn32.json"
tar czf "$FINAL/call5.tgz" -C "$FINAL" call5
