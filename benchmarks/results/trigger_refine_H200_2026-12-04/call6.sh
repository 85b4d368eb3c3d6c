#!/usr/bin/env bash
# Session 25, device call 6: the tuner's refinements on other families' shapes. Each scheme's
# keys tuned from an empty cache with this tree's tuner (no CUTLASS on the machine); what the
# refinement step added is read from each entry's candidates (refine_gain.py).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call6
mkdir -p "$O"
start=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
SHAPES=1024x4096,4096x4096,6144x4096,2048x4096,5120x2048,1280x8192,8192x1024,8192x3584,5120x8192
for s in per_tensor channel_token block128; do
  mkdir -p /tmp/c256$s
  FP8TOWER_CACHE_DIR=/tmp/c256$s timeout 170 python3 -m fp8tower tune --shapes $SHAPES --m 1,8,16,32 \
    --scheme $s --max-configs 4 > "$O/tune_$s.log" 2>&1
  echo "tune $s rc=$? s=$(( $(date +%s) - start ))"
  cp /tmp/c256$s/*.json "$O/tuning_cache_$s.json"
done
tar czf "$FINAL/call6.tgz" -C "$FINAL" call6
