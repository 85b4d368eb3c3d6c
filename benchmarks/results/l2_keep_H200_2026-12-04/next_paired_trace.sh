#!/usr/bin/env bash
# NOT RUN in session 29 (no device machine was lent for it): the paired trace of the merged
# tower with session 26's cache (the one every tower number since session 26 uses), per_tensor
# and channel_token at M = 1, attributed: us per call beyond the bytes at the ceiling (#12's
# 2 us target; last measured in session 18, per_tensor only, 2.50-2.88 us). Run from the
# repository root on the GPU machine: OUT=$OUT bash benchmarks/results/l2_keep_H200_2026-12-04/next_paired_trace.sh
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/paired_trace
mkdir -p "$O" /tmp/ptc
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/ptc FP8TOWER_TUNE=0
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/ptc > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
for sc in per_tensor channel_token; do
  timeout 150 python3 -m fp8tower trace capture --model qwen3.5-27b --arm merged --backend auto --m 1 \
    --scheme $sc --out /tmp/trace_$sc > "$O/${sc}_capture.log" 2>&1
  echo "$sc capture rc=$?"
  timeout 40 python3 -m fp8tower trace attribute /tmp/trace_$sc --json "$O/${sc}_attr.json" \
    > "$O/${sc}_attr.log" 2>&1
  echo "$sc attribute rc=$?"
  head -16 "$O/${sc}_attr.log"
done
tar czf "$FINAL/paired_trace.tgz" -C "$FINAL" paired_trace
