#!/usr/bin/env bash
# Session 25, device call 3: a split program's K steps all in flight (num_stages >= its steps
# + 1), the lead of call 2 (1024x5120). (1) per_tensor 1024x5120 over split x stages x BLOCK_K
# x pre-pass, M = 1..32; (2) weight_only's keys of the nine tower shapes with their stages or
# split changed; (3) block128 / channel_token 5120x6144 (the out_proj) with their stages
# changed. Tuner's chain; cache: scorecard call 2's, restamped.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call3
mkdir -p "$O"
start=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c25s3
mkdir -p /tmp/c25s3
python3 benchmarks/restamp_cache.py benchmarks/results/scorecard_H200_2026-12-04/call2/tuning_cache.json \
  /tmp/c25s3 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
run() {  # name timeout args...
  local name=$1 t=$2; shift 2
  timeout $t python3 benchmarks/bench_gemm.py --precompile --replays 10 --chain model \
    --json "$O/$name.json" "$@" > "$O/$name.log" 2>&1
  echo "$name rc=$? s=$(( $(date +%s) - start ))"
  grep -i "precompile\|Traceback" "$O/$name.log" | head -3
}
A="auto"
for sp in 4 5 6 8; do for st in 3 4 5 6; do for bk in 256 512; do for pq in false true; do
  A="$A,triton[block_n=64,num_warps=4,block_k=$bk,split_k=$sp,num_stages=$st,prequant=$pq,pdl=true,prefetch=1]"
done; done; done; done
run small 150 --shapes 1024x5120 --m 1,8,16,32 --schemes per_tensor --backends "$A"
W="auto"
for st in 2 3 4 5 6 7 8; do W="$W,auto[num_stages=$st]"; done
for sp in 1 2 3 4 6; do W="$W,auto[split_k=$sp]"; done
run wo1 150 --shapes 5120x6144,6144x5120,10240x5120,1024x5120 --m 1,8,16,32 --schemes weight_only --backends "$W"
run wo2 150 --shapes 12288x5120,14336x5120,16384x5120,5120x17408,34816x5120 --m 1,8,16,32 --schemes weight_only --backends "$W"
B="auto"
for st in 3 4 5 6 7; do B="$B,auto[num_stages=$st]"; done
run w8a8 90 --shapes 5120x6144,6144x5120 --m 1,8,16 --schemes block128,channel_token --backends "$B"
tar czf "$FINAL/call3.tgz" -C "$FINAL" call3
