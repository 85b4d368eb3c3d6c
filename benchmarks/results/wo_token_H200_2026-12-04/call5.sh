#!/usr/bin/env bash
# Session 26, device call 5: the weight_only 27B tower (merged, auto, M = 1..32) before and
# after, in one call: the tree before this session (4eea42d, carried as build/old_tree) on
# its own cold-tuned cache (call4/tuning_cache_old.json), this tree on its own
# (call4/tuning_cache_new.json), each restamped by its tree; two rounds, alternated.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call5
mkdir -p "$O"
export PYTHONUNBUFFERED=1
R=benchmarks/results/wo_token_H200_2026-12-04
for arm in old new; do
  src=$PWD/src; [ $arm = old ] && src=$PWD/build/old_tree/src
  mkdir -p /tmp/c5$arm
  PYTHONPATH=$src python3 benchmarks/restamp_cache.py $R/call4/tuning_cache_$arm.json /tmp/c5$arm \
    >> "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
done
for round in 1 2; do
  for arm in old new; do
    src=$PWD/src; [ $arm = old ] && src=$PWD/build/old_tree/src
    PYTHONPATH=$src FP8TOWER_CACHE_DIR=/tmp/c5$arm FP8TOWER_TUNE=0 timeout 200 python3 -m fp8tower \
      bench tower --model qwen3.5-27b --m 1,8,16,32 --arms merged --backends auto \
      --scheme weight_only --json "$O/tower_${arm}_$round.json" > "$O/tower_${arm}_$round.log" 2>&1
    echo "$arm $round rc=$?"; grep -i "weight_only" "$O/tower_${arm}_$round.log" | tail -4
  done
done
tar czf "$FINAL/call5.tgz" -C "$FINAL" call5
