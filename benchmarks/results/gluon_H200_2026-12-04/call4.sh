#!/usr/bin/env bash
# Session 27, device call 4: the Gluon GEMM with x in a buffer of 16 rows (no TMA zero fill),
# W as is or packed, against `auto`, in the tuner's chain and back to back.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call4
mkdir -p "$O" /tmp/c4
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c4
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c4 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
for chain in model gemm; do
  timeout 280 python3 benchmarks/results/gluon_H200_2026-12-04/bench_gluon.py --shapes 5120x6144,10240x5120,5120x17408,16384x5120 \
    --m 1,8 --chain $chain --configs 64x512x4,64x512x4p,64x256x4,64x256x4p,64x256x6p,64x512x3p \
    --json "$O/gluon_$chain.json" > "$O/gluon_$chain.log" 2>&1
  echo "bench $chain rc=$?"
done
python3 benchmarks/results/gluon_H200_2026-12-04/summary.py "$O"
tar czf "$FINAL/call4.tgz" -C "$FINAL" call4
