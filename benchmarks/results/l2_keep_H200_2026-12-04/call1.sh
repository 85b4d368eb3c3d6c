#!/usr/bin/env bash
# Session 29, device call 1: do L2-prefetched lines survive a stream (micro), and a prefetch kernel
# for the next GEMM's first tiles in the merged per_tensor tower (side stream or in the chain).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call1
D=benchmarks/results/l2_keep_H200_2026-12-04
mkdir -p "$O" /tmp/c1
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c1 FP8TOWER_TUNE=0
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c1 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 150 python3 $D/bench_l2_keep.py micro --json "$O/micro.json" > "$O/micro.log" 2>&1
echo "micro rc=$?"; grep -v '^{' "$O/micro.log" | tail -5
timeout 330 python3 $D/bench_l2_keep.py tower --m 1,8 --rounds 3 --schemes per_tensor \
  --arms "none,side:2:last:max,side:2:normal:0,chain:2:last:max,side:4:last:max" \
  --json "$O/tower.json" > "$O/tower.log" 2>&1
echo "tower rc=$?"; tail -4 "$O/tower.log"
tar czf "$FINAL/call1.tgz" -C "$FINAL" call1
