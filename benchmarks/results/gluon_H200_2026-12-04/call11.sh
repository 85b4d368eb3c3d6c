#!/usr/bin/env bash
# Session 27, device call 11: the fused pair (pair_gluon.py) with its A tiles on programs of their
# own (suffix s), against the two `auto` GEMMs, a stand-in before each pair.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call11
mkdir -p "$O" /tmp/c11
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c11
R=benchmarks/results/gluon_H200_2026-12-04
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c11 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 180 python3 $R/pair_gluon.py --m 1,8 --configs 64x512x2@200,64x256x4s,64x512x2s,64x512x4s,64x256x6s --json "$O/pair.json" > "$O/pair.log" 2>&1
echo "pair rc=$?"
cat "$O/pair.log" | cut -c1-160
tar czf "$FINAL/call11.tgz" -C "$FINAL" call11
