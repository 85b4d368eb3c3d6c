#!/usr/bin/env bash
# Session 27, device call 10: the fused pair (pair_gluon.py) with a back-off between polls of its
# count (@NS) and other ring shapes, against the two `auto` GEMMs, a stand-in before each pair.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call10
mkdir -p "$O" /tmp/c10
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c10
R=benchmarks/results/gluon_H200_2026-12-04
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c10 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 180 python3 $R/pair_gluon.py --m 1,8 --configs 64x256x4,64x256x4@200,64x256x4@1000,64x512x2@200,64x128x8@200 --json "$O/pair.json" > "$O/pair.log" 2>&1
echo "pair rc=$?"
cat "$O/pair.log" | cut -c1-160
tar czf "$FINAL/call10.tgz" -C "$FINAL" call10
