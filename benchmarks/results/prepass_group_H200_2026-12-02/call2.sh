#!/usr/bin/env bash
# Session 20, device call 2 (.gpu carried): (a) block128 at M = 32 / 64 with split-K S
# against the default's and cuBLASLt (1280x8192 at M = 64: the last untuned miss, its default
# split 13 of 32 K steps); (b) per_tensor at M = 16 / 32, BLOCK_N 128 against the tuned
# choices on the merged tower's keys (session 18's cache); (c) Nsight Compute on 16384x5120
# per_tensor at M = 1 and 32 (tuned tile) and BLOCK_N 128 at M = 32: is M = 32 bound by L2?
set -uo pipefail
FINAL=${OUT:-out}
OUT=/tmp/call2
mkdir -p "$OUT" "$FINAL"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$OUT/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c18
mkdir -p /tmp/c18 && cp -r .gpu/run/cache/. /tmp/c18/
python3 benchmarks/restamp_cache.py benchmarks/results/deep_default_H200_2026-12-02/call3/retune_ab/nvidia-h200.json \
  /tmp/c18 > "$OUT/restamp.log" 2>&1
timeout 150 python3 benchmarks/bench_gemm.py --shapes 1280x8192,1024x4096,2048x4096,1024x5120,4096x4096,4096x14336,5120x8192 \
  --m 32,64 --schemes block128 --precompile --replays 10 \
  --backends "cublaslt,triton,triton[split_k=4],triton[split_k=8],triton[split_k=16]" \
  --json "$OUT/b128_split.json" > "$OUT/b128_split.log" 2>&1
echo "b128_split rc=$? s=$(( $(date +%s) - start ))"
grep -E "block128 .*(cublaslt|triton)" "$OUT/b128_split.log" | sed 's/ \+/ /g' | head -80
timeout 150 python3 benchmarks/bench_gemm.py --shapes 16384x5120,14336x5120,5120x6144 --m 16,32 \
  --schemes per_tensor --precompile --replays 10 \
  --backends "cublaslt,auto,pair[block_n=128,num_warps=8,split_k=1],pair[block_n=128,num_warps=8,split_k=1,block_k=128],triton[block_n=128,num_warps=8,split_k=1,prequant=false],deep[block_n=128,num_warps=8,num_stages=2]" \
  --json "$OUT/pt_bn128.json" > "$OUT/pt_bn128.log" 2>&1
echo "pt_bn128 rc=$? s=$(( $(date +%s) - start ))"
grep -E "per_tensor " "$OUT/pt_bn128.log" | sed 's/ \+/ /g' | head -60
C64='{"block_k": 256, "block_n": 64, "num_stages": 4, "num_warps": 4, "pdl": true, "prefetch": 1, "prequant": true, "split_k": 1}'
C128='{"block_k": 256, "block_n": 128, "num_stages": 4, "num_warps": 8, "pdl": true, "prefetch": 1, "prequant": true, "split_k": 1}'
i=0
for spec in "1|$C64" "32|$C64" "32|$C128"; do
  i=$((i + 1)); m=${spec%%|*}; cfg=${spec#*|}
  timeout 90 ncu --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    -k regex:_fp8_gemm_decode_kernel --launch-skip 2 --launch-count 1 \
    python3 benchmarks/ncu_gemm.py --scheme per_tensor --shape 16384x5120 --m $m --config "$cfg" \
    > "$OUT/ncu_$i.log" 2>&1
  echo "ncu $i M=$m rc=$? s=$(( $(date +%s) - start ))"
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|L1/TEX Cache Throughput|Memory Throughput|Mem Busy|Max Bandwidth|L2 Hit|Achieved Occupancy" "$OUT/ncu_$i.log" | sed 's/ \+/ /g'
done
echo "total s=$(( $(date +%s) - start ))"
tar -czf "$FINAL/call2.tgz" -C /tmp call2
