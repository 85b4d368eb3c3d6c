#!/usr/bin/env bash
# Session 27, device call 2: the Gluon GEMM's W copies before / after its PDL wait, and W
# packed in contiguous [64, 128] runs, in the tuner's chain and back to back, against `auto`.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call2
mkdir -p "$O" /tmp/c2
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c2
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c2 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
for chain in model gemm; do
  timeout 280 python3 benchmarks/results/gluon_H200_2026-12-04/bench_gluon.py --shapes 5120x6144,10240x5120,5120x17408,16384x5120 \
    --m 1,8 --chain $chain --configs 64x512x4,64x512x4a,64x512x4p,64x256x4,64x256x4a,64x256x4p \
    --json "$O/gluon_$chain.json" > "$O/gluon_$chain.log" 2>&1
  echo "bench $chain rc=$?"
done
python3 benchmarks/results/gluon_H200_2026-12-04/summary.py "$O"
tar czf "$FINAL/call2.tgz" -C "$FINAL" call2
