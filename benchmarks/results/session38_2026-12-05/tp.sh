#!/usr/bin/env bash
# Session 38: the new --tp end to end on the GPU. One rank of Qwen3-8B at tp 2 and of the
# Qwen3.5-27B at tp 2 (merged): tuned from an empty cache (the carried CUTLASS libraries
# only), its keys listed by dispatch, then its tower, auto against cuBLASLt, in one run each.
# Carry [".gpu/run"]. Packs $OUT/tp.tgz after each step.
#   OUT=$OUT bash benchmarks/results/session38_2026-12-05/tp.sh
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-420}
FINAL=${OUT:-out}
O=$FINAL/tp
mkdir -p "$O" .gpu/run/cache
pack() { tar czf "$FINAL/tp.tgz" -C "$FINAL" tp; }
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
tar xJf .gpu/run/prebuilt.tar.xz -C .gpu/run/cache
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/tpc
rm -rf /tmp/tpc && mkdir -p /tmp/tpc && cp -r .gpu/run/cache/. /tmp/tpc/
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
step() {  # name limit cmd...
  local name=$1 lim=$2 l s0; shift 2
  l=$(( $(left) - 5 )); [ "$l" -lt "$lim" ] && lim=$l
  if [ "$lim" -lt 20 ]; then echo "$name skipped: no time left" | tee -a "$O/status.txt"; return; fi
  s0=$(date +%s)
  timeout "$lim" "$@" > "$O/$name.out" 2> "$O/$name.log"
  echo "$name rc=$? s=$(( $(date +%s) - s0 )) t=$(( $(date +%s) - T0 ))" | tee -a "$O/status.txt"
  pack
}
F="python3 -m fp8tower"
step tune_8b 120 $F tune --model qwen3-8b --tp 2 --merged --m 1,8 --scheme per_tensor,channel_token \
  --max-configs 4 --json
step dispatch_8b 30 $F dispatch --model qwen3-8b --tp 2 --merged --json
step tower_8b 90 $F bench tower --model qwen3-8b --tp 2 --arms merged --m 1,8 \
  --backends cublaslt,auto --scheme per_tensor,channel_token --rounds 2 --json "$O/tower_8b.json"
step tune_27b 90 $F tune --model qwen3.5-27b --tp 2 --merged --m 1 --scheme per_tensor \
  --max-configs 4 --json
step tower_27b 70 $F bench tower --model qwen3.5-27b --tp 2 --arms merged --m 1 \
  --backends cublaslt,auto --scheme per_tensor --rounds 2 --json "$O/tower_27b.json"
python3 benchmarks/tower_rows.py "$O" > "$O/tower_rows.txt" 2>&1
pack
cat "$O/status.txt" "$O/tower_rows.txt"
