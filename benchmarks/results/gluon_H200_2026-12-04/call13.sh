#!/usr/bin/env bash
# Session 27, device call 13: the Gluon GEMM in one launch (flag q: no pre-pass, x quantized in the
# kernel, read by its threads two K steps ahead), W first, against `auto`, both chains.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call13
mkdir -p "$O" /tmp/c13
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c13
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c13 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
for chain in model gemm; do
  timeout 280 python3 benchmarks/results/gluon_H200_2026-12-04/bench_gluon.py --shapes 5120x6144,10240x5120,5120x17408,16384x5120 \
    --m 1,8 --chain $chain --configs 64x512x4,64x512x4q,64x512x4qh,64x256x4qh,64x256x6qh,64x512x5qh \
    --json "$O/gluon_$chain.json" > "$O/gluon_$chain.log" 2>&1
  echo "bench $chain rc=$?"
done
python3 benchmarks/results/gluon_H200_2026-12-04/summary.py "$O"
tar czf "$FINAL/call13.tgz" -C "$FINAL" call13
