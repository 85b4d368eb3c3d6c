#!/usr/bin/env bash
# Session 27, device call 5: the Gluon GEMM (packed W) asking L2 for the W tile 2-16 steps past its ring
# (cp.async.bulk.prefetch, the first ones before its PDL wait), against `auto`, both chains.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call5
mkdir -p "$O" /tmp/c5
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c5
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c5 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
for chain in model gemm; do
  timeout 280 python3 benchmarks/results/gluon_H200_2026-12-04/bench_gluon.py --shapes 5120x6144,10240x5120,5120x17408,16384x5120 \
    --m 1,8 --chain $chain --configs 64x512x4p,64x512x4p@2,64x512x4p@4,64x512x4p@8,64x256x4p,64x256x4p@4,64x256x4p@8,64x256x4p@16 \
    --json "$O/gluon_$chain.json" > "$O/gluon_$chain.log" 2>&1
  echo "bench $chain rc=$?"
done
python3 benchmarks/results/gluon_H200_2026-12-04/summary.py "$O"
tar czf "$FINAL/call5.tgz" -C "$FINAL" call5
