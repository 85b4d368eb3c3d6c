#!/usr/bin/env bash
# Session 27, device call 3: the Gluon GEMM with its next MMA issued before a stage is refilled (PIPE 1)
# and on two accumulators (PIPE 2, flag d), against one MMA at a time (flag s), and `auto`.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call3
mkdir -p "$O" /tmp/c3
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c3
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c3 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
for chain in model gemm; do
  timeout 280 python3 benchmarks/results/gluon_H200_2026-12-04/bench_gluon.py --shapes 5120x6144,10240x5120,5120x17408,16384x5120 \
    --m 1,8 --chain $chain --configs 64x512x4s,64x512x4,64x512x4d,64x512x4pd,64x256x4,64x256x4d,64x256x4pd \
    --json "$O/gluon_$chain.json" > "$O/gluon_$chain.log" 2>&1
  echo "bench $chain rc=$?"
done
python3 benchmarks/results/gluon_H200_2026-12-04/summary.py "$O"
tar czf "$FINAL/call3.tgz" -C "$FINAL" call3
