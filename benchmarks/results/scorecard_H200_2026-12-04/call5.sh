#!/usr/bin/env bash
# Session 23, device call 5 (.gpu/run carried, as call 3): GPU tests of the tuner's chain (now
# tuning.search.Chain) and its timer; call 3's free_kb A/B for block128 (not reached there).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call5
mkdir -p "$O"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c25
mkdir -p /tmp/c25 && cp -r .gpu/run/cache/. /tmp/c25/
python3 benchmarks/restamp_cache.py benchmarks/results/scorecard_H200_2026-12-04/call2/tuning_cache.json \
  /tmp/c25 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
timeout 100 python3 -m pytest -q -m gpu tests/test_dispatch.py tests/test_tuning.py \
  -p no:cacheprovider > "$O/tests.log" 2>&1
echo "tests rc=$? s=$(( $(date +%s) - start ))"; tail -3 "$O/tests.log"
timeout 90 python3 benchmarks/bench_cutlass_free.py --m 32 --rounds 2 --schemes block128 \
  --json "$O/free_block128.json" > "$O/free_block128.log" 2>&1
echo "free rc=$? s=$(( $(date +%s) - start ))"; tail -2 "$O/free_block128.log"
tar czf "$FINAL/call5.tgz" -C "$FINAL" call5 && rm -rf "$O"
