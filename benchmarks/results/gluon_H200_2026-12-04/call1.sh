#!/usr/bin/env bash
# Session 27, device call 1: the Gluon GEMM whose W tiles stream before its PDL wait
# (benchmarks/results/gluon_H200_2026-12-04/bench_gluon.py), per_tensor, against `auto` (session 26's cache) in the tuner's chain.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call1
mkdir -p "$O"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c1
python3 -c "import triton; print('triton', triton.__version__)"
mkdir -p /tmp/c1
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c1 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 400 python3 benchmarks/results/gluon_H200_2026-12-04/bench_gluon.py --shapes 5120x6144,16384x5120,10240x5120,5120x17408,1024x5120 \
  --m 1,8 --configs 64x256x4,64x512x3,64x256x6,128x256x3,64x128x8,64x512x4,64x256x4n \
  --json "$O/gluon.json" > "$O/gluon.log" 2>&1
echo "bench rc=$?"
grep -v "^ *$" "$O/gluon.log" | cut -c1-150
tar czf "$FINAL/call1.tgz" -C "$FINAL" call1
