#!/usr/bin/env bash
# Session 25, device call 1: where a PDL launch lets the next kernel launch (config "trigger").
# The merged 27B tower with every Triton PDL GEMM's cached config at trigger cached / 1 (the GEMM
# after its K loop) / 2 (the pre-pass after its wait) / 3 (both), arms alternated; then the
# per-GEMM chains (back to back, and the tuner's) with auto against auto[trigger=...].
# Cache: scorecard call 2's, restamped.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call1
mkdir -p "$O"
start=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c25s1
mkdir -p /tmp/c25s1
python3 benchmarks/restamp_cache.py benchmarks/results/scorecard_H200_2026-12-04/call2/tuning_cache.json \
  /tmp/c25s1 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
for s in per_tensor channel_token block128; do
  timeout 150 python3 benchmarks/bench_trigger.py --schemes $s --m 1,8,16 --rounds 2 \
    --json "$O/tower_$s.json" > "$O/tower_$s.log" 2>&1
  echo "tower $s rc=$? s=$(( $(date +%s) - start ))"
  grep -v "^$" "$O/tower_$s.log" | grep -v Warning | tail -4
done
ARMS="auto,auto[trigger=1],auto[trigger=2],auto[trigger=3]"
for chain in gemm model; do
  timeout 150 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8 --schemes per_tensor \
    --precompile --replays 10 --chain $chain --backends "$ARMS" \
    --json "$O/gemm_$chain.json" > "$O/gemm_$chain.log" 2>&1
  echo "gemm $chain rc=$? s=$(( $(date +%s) - start ))"
  grep -v "^$" "$O/gemm_$chain.log" | tail -25
done
tar czf "$FINAL/call1.tgz" -C "$FINAL" call1
