#!/usr/bin/env bash
# Session 19, device call 7 (a temporary knob, not committed: FP8TOWER_PT_GROUP sets
# per_tensor's pre-pass group, 2048 elements a program): is the deep tile's M = 1 loss on
# 64-80 tiles the pre-pass's program count (7 at K = 14336, M = 1; 56 at M = 8)?
set -uo pipefail
OUT=${OUT:-out}
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
i=0
for g in 2048 512 256 2048; do
  i=$((i + 1))
  FP8TOWER_PT_GROUP=$g timeout 60 python3 benchmarks/bench_gemm.py --shapes 4096x14336,5120x6144,5120x17408 \
    --m 1,8 --schemes per_tensor --backends nodeep,deep --replays 10 \
    --json "$OUT/group_${i}_$g.json" > "$OUT/group_${i}_$g.log" 2>&1
  echo "group $g rc=$?"; grep -E "per_tensor .* (deep|nodeep) " "$OUT/group_${i}_$g.log" | sed 's/ \+/ /g'
done
