#!/usr/bin/env bash
# Session 28, device call 4: x's amax (channel_token's fused amax, weight_only's split in the
# GEMM at M = 1) read in the K loop's first step, after the pipeline's prologue asked for W
# (late_x), against before the loop; per GEMM in the tuner's chain, on the tuned choice and on
# those one-launch configs forced on every tower shape.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call4
R=benchmarks/results/wfirst_H200_2026-12-04
mkdir -p "$O" /tmp/c4
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c4 FP8TOWER_TUNE=0
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c4 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 150 python3 benchmarks/bench_gemm.py --shapes tower --m 1 --schemes weight_only \
  --backends "auto,auto[prequant=false,wo_mode=4],auto[prequant=false,wo_mode=4,late_x=true]" \
  --json "$O/gemm_wo.json" > "$O/gemm_wo.log" 2>&1
echo "wo rc=$?"
python3 $R/summary.py "$O/gemm_wo.json"
timeout 250 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16 --schemes channel_token \
  --backends "auto,auto[fused_amax=true],auto[fused_amax=true,late_x=true]" \
  --json "$O/gemm_ct.json" > "$O/gemm_ct.log" 2>&1
echo "ct rc=$?"
python3 $R/summary.py "$O/gemm_ct.json"
tar czf "$FINAL/call4.tgz" -C "$FINAL" call4
