#!/usr/bin/env bash
# Session 26, device call 4: weight_only tuned from cold for the 27B model's keys (7 M
# buckets, the 60 s bar), the tree before this session (4eea42d, carried as
# build/old_tree: git archive 4eea42d src) and this one, each with a fresh triton cache.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call4
mkdir -p "$O"
export PYTHONUNBUFFERED=1
for arm in old new; do
  src=$PWD/src; [ $arm = old ] && src=$PWD/build/old_tree/src
  mkdir -p /tmp/c4$arm /tmp/t4$arm
  t0=$(date +%s)
  PYTHONPATH=$src FP8TOWER_CACHE_DIR=/tmp/c4$arm TRITON_CACHE_DIR=/tmp/t4$arm timeout 200 \
    python3 -m fp8tower tune --model qwen3.5-27b --scheme weight_only > "$O/tune_$arm.log" 2>&1
  echo "$arm rc=$? took $(( $(date +%s) - t0 )) s"; grep -m1 "tuned keys" "$O/tune_$arm.log"
  cp /tmp/c4$arm/*.json "$O/tuning_cache_$arm.json"
done
tar czf "$FINAL/call4.tgz" -C "$FINAL" call4
