#!/usr/bin/env bash
# Session 29, device call 2: what one L2 prefetch brings (pieces of 128 / 64 / 32 bytes, bulk),
# and the GEMM's own W prefetch before its wait in pieces of 64 / 32 bytes, in the merged tower.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call2
D=benchmarks/results/l2_keep_H200_2026-12-04
mkdir -p "$O" /tmp/c2
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c2 FP8TOWER_TUNE=0
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c2 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 120 python3 $D/bench_l2_keep.py gran --json "$O/gran.json" > "$O/gran.log" 2>&1
echo "gran rc=$?"; python3 -c "
import json; d=json.load(open('$O/gran.json'))
for r in d['rows']: print(r['fetch_granularity'], r['pre'], r['hint'], r['step'], r['stream_mb'], r['read_us'])"
timeout 400 python3 $D/bench_l2_keep.py pfstep --m 1,8 --rounds 3 --schemes per_tensor,channel_token \
  --arms "step128,step64,step32" --json "$O/pfstep.json" > "$O/pfstep.log" 2>&1
echo "pfstep rc=$?"; tail -4 "$O/pfstep.log"
tar czf "$FINAL/call2.tgz" -C "$FINAL" call2
