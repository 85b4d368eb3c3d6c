#!/usr/bin/env bash
# Session 21, device call 8 (.gpu carried; the final tree and call 4's cache): the merged tower
# with the stand-ins on torch.add (the tower's definition) and on tower/standin.rows_add (one
# stride-aware kernel, the same bits), M = 1, 8, 32, all three W8A8 schemes, two rounds.
set -uo pipefail
FINAL=${OUT:-out}
mkdir -p "$FINAL/call8"
. benchmarks/device_wheels.sh
install_wheels .gpu/run /tmp/status.txt
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c21
mkdir -p /tmp/c21 && cp -r .gpu/run/cache/. /tmp/c21/
python3 benchmarks/restamp_cache.py benchmarks/results/m32_gap_H200_2026-12-02/call4/retune_ab/nvidia-h200.json \
  /tmp/c21 > "$FINAL/call8/restamp.log" 2>&1
timeout 170 python3 benchmarks/bench_standin.py --m 1,8,32 --rounds 2 \
  --json "$FINAL/call8/standin.json" > "$FINAL/call8/standin.log" 2>&1
echo "standin rc=$?"; tail -16 "$FINAL/call8/standin.log"
