#!/usr/bin/env bash
# Session 27, device call 12: the Gluon GEMM with deeper rings (5-6 stages of 32 KB), x in 8 rows (flag h)
# where that makes them fit, against `auto`, both chains.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call12
mkdir -p "$O" /tmp/c12
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c12
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c12 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
for chain in model gemm; do
  timeout 280 python3 benchmarks/results/gluon_H200_2026-12-04/bench_gluon.py --shapes 5120x6144,10240x5120,5120x17408,16384x5120 \
    --m 1,8 --chain $chain --configs 64x512x4,64x512x4h,64x512x5,64x512x5h,64x512x6h,64x256x4ph,64x256x6ph \
    --json "$O/gluon_$chain.json" > "$O/gluon_$chain.log" 2>&1
  echo "bench $chain rc=$?"
done
python3 benchmarks/results/gluon_H200_2026-12-04/summary.py "$O"
tar czf "$FINAL/call12.tgz" -C "$FINAL" call12
