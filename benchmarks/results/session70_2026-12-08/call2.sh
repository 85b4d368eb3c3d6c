#!/usr/bin/env bash
# Session 70's cluster call (prepared; carry .gpu/run with prebuild_cutlass.py's
# prebuilt.tar.xz and prebuild_cluster.py's cluster.tar.xz): CUTLASS with 2 or 4
# CTAs a cluster along the weight's rows, x multicast by TMA, against the same schedule
# without a cluster.
# 1. cluster_bits.py: bit-equal outputs, SQNR >= 40 dB (bits.json);
# 2. bench_gemm.py in the tuner's chain, untuned cache, arms alternated over 2 rounds: the
#    wide GEMMs' Triton config (session 65's tuned in_proj M = 32 choice on the H200), CUTLASS
#    pf / pp with and without a cluster (chain.json).
#   BUDGET=590 OUT=$OUT bash benchmarks/results/session70_2026-12-08/call2.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-590}"
O=/tmp/cl
rm -rf "$O" && mkdir -p "$O"
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
cold_cache .gpu/run /tmp/clc
tar xJf .gpu/run/cluster.tar.xz -C /tmp/clc
export FP8TOWER_CACHE_DIR=/tmp/clc FP8TOWER_TUNE=0
t=$(date +%s)
timeout -k 10 "$(lim 90)" python3 benchmarks/results/session70_2026-12-08/cluster_bits.py \
  "$O/bits.json" > "$O/bits.log" 2>&1
echo "bits rc=$? s=$(( $(date +%s) - t )) left=$(left)" | tee -a "$O/status.txt"
tail -3 "$O/bits.log"
C="block_k=256,num_stages=4,num_warps=4,pdl=true,prefetch=1,prequant=true,split_k=1,packed=true"
A="untuned,triton[block_n=64,$C],cutlass,cutlass[cluster=2],cutlass[cluster=4]"
A="$A,cutlass[sched=pp,pdl=false],cutlass[sched=pp,pdl=false,cluster=2]"
t=$(date +%s)
timeout -k 10 "$(lim 400)" python3 benchmarks/bench_gemm.py \
  --shapes 16384x5120,14336x5120,10240x5120,34816x5120,5120x6144,6144x5120,5120x17408 \
  --m 1,8,16,32 --schemes per_tensor,channel_token --backends "$A" --rounds 2 \
  --json "$O/chain.json" > "$O/chain.log" 2>&1
echo "chain rc=$? s=$(( $(date +%s) - t )) left=$(left)" | tee -a "$O/status.txt"
cp "$O/status.txt" "$OUT/"
tar czf "$OUT/cl.tgz" -C /tmp cl
