#!/usr/bin/env bash
# Session 17, device call 1 (run from the repository root on the GPU machine, .gpu carried):
# the prefetch-depth A/B in the merged 27B tower at session 16's final cache (M = 1, 8), then
# bench_split.py (the split-K default's refit). Outputs in $OUT/c1/.
set -uo pipefail
OUT=${OUT:-out}
RUN=.gpu/run
C=/tmp/c1cache
mkdir -p "$OUT/c1" "$C"
. benchmarks/device_wheels.sh
install_wheels "$RUN" "$OUT/c1/status.txt"
cp -r "$RUN"/cache/. "$C/"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=$C
python3 benchmarks/restamp_cache.py \
  benchmarks/results/refine_rounds_H200_2026-12-02/call7/tuning_cache.json "$C" | tee -a "$OUT/c1/status.txt"
t=$(date +%s)
timeout "${PREFETCH_S:-400}" python3 benchmarks/bench_prefetch_depth.py --m "${PREFETCH_M:-1,8}" \
  --json "$OUT/c1/prefetch.json" > "$OUT/c1/prefetch.log" 2>&1
echo "prefetch rc=$? s=$(( $(date +%s) - t ))" | tee -a "$OUT/c1/status.txt"
t=$(date +%s)
[ "${SPLIT_S:-120}" = 0 ] || timeout "${SPLIT_S:-120}" python3 benchmarks/bench_split.py --json "$OUT/c1/split.json" > "$OUT/c1/split.log" 2>&1
echo "split rc=$? s=$(( $(date +%s) - t ))" | tee -a "$OUT/c1/status.txt"
tail -12 "$OUT/c1/prefetch.log"
tail -25 "$OUT/c1/split.log"
