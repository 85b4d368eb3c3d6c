#!/usr/bin/env bash
# Session 28, device call 6: the tuned per_tensor choice with its other way of taking x (the
# pre-pass pair or x quantized in the GEMM; PDL as cached), per GEMM in the tuner's chain and in
# the merged tower (every cached Triton choice so), arms alternated.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call6
mkdir -p "$O" /tmp/c6
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c6 FP8TOWER_TUNE=0
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c6 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 200 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16 --schemes per_tensor --precompile \
  --backends "auto,auto[prequant=false],auto[prequant=true]" --json "$O/gemm_pt.json" > "$O/gemm_pt.log" 2>&1
echo "gemm rc=$?"
python3 benchmarks/results/wfirst_H200_2026-12-04/summary.py "$O/gemm_pt.json"
timeout 200 python3 benchmarks/bench_override.py --arms "cached,prequant=false,prequant=true" --m 1,8 --rounds 2 \
  --schemes per_tensor --json "$O/tower.json" > "$O/tower.log" 2>&1
echo "tower rc=$?"; tail -3 "$O/tower.log"
tar czf "$FINAL/call6.tgz" -C "$FINAL" call6
