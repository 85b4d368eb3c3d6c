#!/usr/bin/env bash
# Session 29, device call 4: the GEMM's first W tile before its wait asked of L2 by loads (one
# byte a 128-byte line with .L2::128B, or one a 64-byte piece) instead of prefetches, in the
# merged tower, arms alternated.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call4
D=benchmarks/results/l2_keep_H200_2026-12-04
mkdir -p "$O" /tmp/c4
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c4 FP8TOWER_TUNE=0
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c4 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 500 python3 $D/bench_l2_keep.py pfstep --m 1,8 --rounds 3 --schemes per_tensor,channel_token,block128 \
  --arms "step128,ld128,ld64" --json "$O/pfload.json" > "$O/pfload.log" 2>&1
echo "pfload rc=$?"; tail -6 "$O/pfload.log"
tar czf "$FINAL/call4.tgz" -C "$FINAL" call4
