#!/usr/bin/env bash
# Session 27, device call 6: the merged 27B tower (per_tensor) with its in_projs, then also its
# out_projs, on the Gluon W-first kernel, against `auto` (session 26's cache), arms alternated.
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call6
mkdir -p "$O" /tmp/c6
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c6
R=benchmarks/results/gluon_H200_2026-12-04
python3 benchmarks/restamp_cache.py benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json /tmp/c6 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
python3 -c "from fp8tower.tuning.ceiling import read_ceiling; print('ceiling', read_ceiling())"
timeout 400 python3 $R/tower_gluon.py --m 1,8 --rounds 3 --json "$O/tower.json" > "$O/tower.log" 2>&1
echo "tower rc=$?"
tail -4 "$O/tower.log"
tar czf "$FINAL/call6.tgz" -C "$FINAL" call6
