#!/usr/bin/env bash
# Session 19, device call 3 (.gpu carried): with configs.deep_default in,
# (a) the untuned safe default against cuBLASLt and against the default without the deep
#     tile ("nodeep"), other families' shapes and the 27B tower's, M = 1-64, three W8A8 schemes;
# (b) session 18's final cache: the merged 27B tower at M = 1, 8, 32, all W8A8 schemes, then
#     the same retuned in context with this tree, one round each (benchmarks/retune_ab.sh).
set -uo pipefail
OUT=${OUT:-out}
SHAPES=6144x4096,4096x4096,1024x4096,28672x4096,4096x14336,24576x4096,4096x12288,10240x5120
SHAPES=$SHAPES,5120x8192,51200x5120,5120x25600,10240x8192,8192x8192,57344x8192,8192x28672
SHAPES=$SHAPES,1280x8192,8192x1024,7168x8192,8192x3584,5120x2048,2048x4096
SHAPES=$SHAPES,16384x5120,14336x5120,5120x6144,6144x5120,12288x5120,1024x5120,34816x5120,5120x17408
start=$(date +%s)
PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 timeout 280 python3 benchmarks/bench_gemm.py --shapes "$SHAPES" \
  --m 1,2,4,8,16,32,64 --schemes per_tensor,channel_token,block128 --backends cublaslt,untuned,nodeep \
  --precompile --replays 10 --json "$OUT/untuned.json" > "$OUT/untuned.log" 2>&1
echo "untuned rc=$? s=$(( $(date +%s) - start ))"
grep -E "read ceiling|precompile|wrote" "$OUT/untuned.log"
CACHE_JSON=benchmarks/results/k_rot_H200_2026-12-02/call5/tuning_cache.json TOWER_M=1,8,32 \
  TOWER_SCHEMES=per_tensor,channel_token,block128 RETUNE_S=170 ROUNDS=1 \
  bash benchmarks/retune_ab.sh 2>&1 | grep -v "^    " | tail -14
echo "total s=$(( $(date +%s) - start ))"
