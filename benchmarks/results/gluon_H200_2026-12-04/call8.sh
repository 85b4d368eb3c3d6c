#!/usr/bin/env bash
# Session 27, device call 8: the Gluon GEMM with W by cp.async (16 bytes a thread, as Triton copies it)
# before and after its PDL wait (flags c, ac), against TMA W and `auto`, both chains.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call8
mkdir -p "$O" /tmp/c8
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c8
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c8 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
for chain in model gemm; do
  timeout 280 python3 benchmarks/results/gluon_H200_2026-12-04/bench_gluon.py --shapes 5120x6144,10240x5120,5120x17408,16384x5120 \
    --m 1,8 --chain $chain --configs 64x512x4c,64x512x4ac,64x256x4c,64x256x4ac,64x512x4,64x256x4p \
    --json "$O/gluon_$chain.json" > "$O/gluon_$chain.log" 2>&1
  echo "bench $chain rc=$?"
done
python3 benchmarks/results/gluon_H200_2026-12-04/summary.py "$O"
tar czf "$FINAL/call8.tgz" -C "$FINAL" call8
