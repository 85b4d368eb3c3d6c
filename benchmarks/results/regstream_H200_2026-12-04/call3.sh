#!/usr/bin/env bash
# Session 24, device call 3: the N = 5120 shapes (80 programs of 64 rows: the body is bound by
# what each program keeps in flight, call 2) with a deeper pipeline than the tuner's space
# (5 stages of BLOCK_K 512) and split in two, against auto (scorecard call 2's cache).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call3
mkdir -p "$O"
start=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c24s3
mkdir -p /tmp/c24s3
python3 benchmarks/restamp_cache.py benchmarks/results/scorecard_H200_2026-12-04/call2/tuning_cache.json \
  /tmp/c24s3 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
C="block_n=64,block_k=512,num_warps=4,prequant=true,pdl=true,prefetch=1"
timeout 200 python3 benchmarks/bench_gemm.py --schemes per_tensor --m 1,8 --replays 10 \
  --shapes 5120x6144,5120x17408 \
  --backends "auto,triton[$C,split_k=1,num_stages=4],triton[$C,split_k=1,num_stages=5],triton[$C,split_k=2,num_stages=4],triton[$C,split_k=2,num_stages=5]" \
  --json "$O/deep.json" > "$O/deep.log" 2>&1
echo "deep rc=$? s=$(( $(date +%s) - start ))"
tail -30 "$O/deep.log"
tar czf "$FINAL/call3.tgz" -C "$FINAL" call3
