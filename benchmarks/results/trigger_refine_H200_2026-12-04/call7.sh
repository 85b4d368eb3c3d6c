#!/usr/bin/env bash
# Session 25, device call 7: why PDL pairs at M = 1 run slower back to back than at M = 8 with
# the same config (call 1: 5120x17408 27.5 against 25.1 us). GEMMs back to back (--chain gemm),
# M = 1 / 2 / 4 / 8: the M = 1 / 8 tuned config of both shapes (BLOCK_K 512 unsplit, the PDL
# pre-pass pair), the same without PDL, x quantized in the GEMM with PDL; and the pre-pass grid
# at 512 / 8192 elements a program. Also the tuner's chain. No cache needed.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call7
mkdir -p "$O"
start=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c257
T="block_n=64,block_k=512,split_k=1,num_warps=4,num_stages=4"
A="triton[$T,prequant=true,pdl=true,prefetch=1],triton[$T,prequant=true,pdl=false,prefetch=0]"
A="$A,triton[$T,prequant=false,pdl=true,prefetch=1]"
for g in default 512 8192; do
  extra=""; [ $g != default ] && extra="--prepass-group $g"
  for chain in gemm model; do
    timeout 100 python3 benchmarks/bench_gemm.py --shapes 5120x17408,5120x6144 --m 1,2,4,8 \
      --schemes per_tensor --precompile --replays 10 --chain $chain --backends "$A" $extra \
      --json "$O/b2b_${g}_$chain.json" > "$O/b2b_${g}_$chain.log" 2>&1
    echo "group $g chain $chain rc=$? s=$(( $(date +%s) - start ))"
  done
done
tar czf "$FINAL/call7.tgz" -C "$FINAL" call7
