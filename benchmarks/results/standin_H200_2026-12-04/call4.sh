#!/usr/bin/env bash
# Session 22, device call 4 (.gpu carried; session 21's final cache restamped): the final table,
# one run each: `fp8tower bench tower` merged + auto, three W8A8 schemes, M = 1, 8, 16, 32,
# with the tower's stand-ins (--standin torch) and then with the stride-aware ones (--standin rows).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call4
mkdir -p "$O"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c22
mkdir -p /tmp/c22 && cp -r .gpu/run/cache/. /tmp/c22/
python3 benchmarks/restamp_cache.py benchmarks/results/m32_gap_H200_2026-12-02/call4/retune_ab/nvidia-h200.json \
  /tmp/c22 > "$O/restamp.log" 2>&1
for st in torch rows; do
  timeout 200 python3 -m fp8tower bench tower --model qwen3.5-27b --m 1,8,16,32 --arms merged \
    --backends auto --scheme per_tensor,channel_token,block128 --standin $st \
    --json "$O/tower_$st.json" > "$O/tower_$st.log" 2>&1
  echo "tower $st rc=$? s=$(( $(date +%s) - start ))"
done
python3 benchmarks/tower_rows.py "$O"
