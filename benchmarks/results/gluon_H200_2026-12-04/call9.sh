#!/usr/bin/env bash
# Session 27, device call 9: out_proj (5120x6144) and the next in_proj (16384x5120) in one
# persistent Gluon kernel with a grid-wide count between them (pair_gluon.py), against the two
# `auto` GEMMs, a stand-in before each pair.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call9
mkdir -p "$O" /tmp/c9
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c9
R=benchmarks/results/gluon_H200_2026-12-04
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c9 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 180 python3 $R/pair_gluon.py --m 1,8 --configs 64x256x4 --json "$O/pair.json" > "$O/pair.log" 2>&1
echo "pair rc=$?"
cat "$O/pair.log" | cut -c1-160
tar czf "$FINAL/call9.tgz" -C "$FINAL" call9
