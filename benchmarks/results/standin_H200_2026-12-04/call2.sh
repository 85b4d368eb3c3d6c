#!/usr/bin/env bash
# Session 22, device call 2 (.gpu carried; session 21's final cache restamped): (a) block128 and
# channel_token at M = 16 / 32 on the merged tower's shapes: BLOCK_N 128 with the pre-pass (not
# yet timed for them) against auto; (b) the per-GEMM scorecard of issue #12: per_tensor on the
# tower's shapes at M = 1, 8, 16, 32 against cuBLASLt, tuned (auto) and untuned; weight_only the same.
set -uo pipefail
FINAL=${OUT:-out}
mkdir -p "$FINAL/call2"
O=$FINAL/call2
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c22
mkdir -p /tmp/c22 && cp -r .gpu/run/cache/. /tmp/c22/
python3 benchmarks/restamp_cache.py benchmarks/results/m32_gap_H200_2026-12-02/call4/retune_ab/nvidia-h200.json \
  /tmp/c22 > "$O/restamp.log" 2>&1
timeout 170 python3 benchmarks/bench_gemm.py --shapes 16384x5120,14336x5120,5120x6144 --m 16,32 \
  --schemes block128,channel_token --precompile --replays 10 \
  --backends "auto,pair,pair[block_n=128,num_warps=8,split_k=1],pair[block_n=128,num_warps=4,split_k=1],pair[block_n=128,num_warps=8,split_k=1,num_stages=3]" \
  --json "$O/wide_pair.json" > "$O/wide_pair.log" 2>&1
echo "wide_pair rc=$? s=$(( $(date +%s) - start ))"
grep -E "(block128|channel_token) " "$O/wide_pair.log" | sed 's/ \+/ /g' | head -70
timeout 330 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 \
  --schemes per_tensor,weight_only --precompile --replays 10 --backends cublaslt,auto,untuned \
  --json "$O/scorecard.json" > "$O/scorecard.log" 2>&1
echo "scorecard rc=$? s=$(( $(date +%s) - start ))"
tail -40 "$O/scorecard.log"
