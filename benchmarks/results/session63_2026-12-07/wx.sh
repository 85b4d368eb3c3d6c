#!/usr/bin/env bash
# Session 63 (carry .gpu/run; either card): does the tuner's chain rank better for the step
# with an x writer before every GEMM (search.WRITE_X_EVERY = 1, the context most GEMMs of a
# model see: a norm / activation / stand-in before them) than with today's one before every
# second (2)? Per scheme (SCHEMES, default per_tensor) at MS (default 1,8,32): the merged
# 27B tower tuned from cold in `bench tower` with 2 ("w2") and, in a second cache, with 1
# ("w1", the module constant set in the process), then both timed again alternated (w2, w1,
# w1, w2). Outputs: DIR (default wx)/status.txt, DIR/wx.tgz (tower JSON and logs, caches).
#   BUDGET=560 OUT=$OUT bash benchmarks/results/session63_2026-12-07/wx.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-560}"
O=$OUT/${DIR:-wx}
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
tower() {  # scheme every tag
  FP8TOWER_CACHE_DIR=/tmp/wx_$1_$2 timeout -k 10 "$(lim 150)" python3 -c \
    "import sys, fp8tower.tuning.search as s; s.WRITE_X_EVERY = $2
from fp8tower.cli import main; main()" bench tower \
    --model qwen3.5-27b --arms merged --backends auto --scheme "$1" --m "${MS:-1,8,32}" \
    --rounds 2 --json "$O/tower_$1_w$2$3.json" > "$O/tower_$1_w$2$3.log" 2>&1
  echo "$1 w$2$3 rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "│ $1" "$O/tower_$1_w$2$3.log" | head -4
}
for scheme in ${SCHEMES:-per_tensor}; do
  cold_cache .gpu/run "/tmp/wx_${scheme}_2" "/tmp/wx_${scheme}_1"
  tower "$scheme" 2 ""; tower "$scheme" 1 ""; tower "$scheme" 1 b; tower "$scheme" 2 b
  cp /tmp/wx_${scheme}_2/*.json "$O/cache_${scheme}_w2.json" 2>/dev/null
  cp /tmp/wx_${scheme}_1/*.json "$O/cache_${scheme}_w1.json" 2>/dev/null
done
(cd "$O" && tar czf wx.tgz ./*.log ./*.json && rm -f ./*.log ./*.json)
