#!/usr/bin/env bash
# Session 24, device call 1: the register-streamed GEMM experiment (benchmarks/results/regstream_H200_2026-12-04/bench_regstream.py)
# against auto (scorecard call 2's tuned cache, restamped) in the tuner's chain, per_tensor.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call1
mkdir -p "$O"
start=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c24s1
mkdir -p /tmp/c24s1
python3 benchmarks/restamp_cache.py benchmarks/results/scorecard_H200_2026-12-04/call2/tuning_cache.json \
  /tmp/c24s1 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 400 python3 benchmarks/results/regstream_H200_2026-12-04/bench_regstream.py --shapes 5120x6144,10240x5120,16384x5120 --m 1,8 \
  --out "$O/regstream.json" > "$O/regstream.log" 2>&1
echo "regstream rc=$? s=$(( $(date +%s) - start ))"
grep -v "^$" "$O/regstream.log" | tail -80
tar czf "$FINAL/call1.tgz" -C "$FINAL" call1
