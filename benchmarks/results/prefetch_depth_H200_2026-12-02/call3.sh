#!/usr/bin/env bash
# Session 17, device call 3 (run from the repository root on the GPU machine, .gpu carried):
# the ratio keys retuned wide in context from session 16's final cache (per_tensor and
# block128 at M = 32, channel_token and block128 at M = 8; --max-configs 120), the merged
# 27B tower at M = 1, 8, 32 before / after, arms alternated; then prefetch depths 0 and 1.
set -uo pipefail
OUT=${OUT:-out}
RUN=.gpu/run
D=$OUT/c3
mkdir -p "$D" /tmp/c3_before /tmp/c3_after
. benchmarks/device_wheels.sh
install_wheels "$RUN" "$D/status.txt"
for arm in before after; do cp -r "$RUN"/cache/. "/tmp/c3_$arm/"; done
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
python3 benchmarks/restamp_cache.py benchmarks/results/refine_rounds_H200_2026-12-02/call7/tuning_cache.json \
  /tmp/c3_before /tmp/c3_after | tee -a "$D/status.txt"
retune() {  # retune NAME M SCHEMES
  local t=$(date +%s)
  FP8TOWER_CACHE_DIR=/tmp/c3_after timeout "${RETUNE_S:-200}" python3 -m fp8tower tune \
    --model qwen3.5-27b --merged --m "$2" --scheme "$3" --max-configs "${MAX_CONFIGS:-120}" \
    --in-context --retune --json > "$D/retune_$1.json" 2> "$D/retune_$1.log"
  echo "retune $1 rc=$? s=$(( $(date +%s) - t ))" | tee -a "$D/status.txt"
}
retune m32 32 per_tensor,block128
retune m8 8 channel_token,block128
cp /tmp/c3_after/*.json "$D/"  # the retuned cache (nvidia-h200.json)
for round in 1 2; do
  for arm in before after; do
    t=$(date +%s)
    FP8TOWER_CACHE_DIR=/tmp/c3_$arm timeout 150 python3 -m fp8tower bench tower \
      --model qwen3.5-27b --m 1,8,32 --arms merged --backends auto \
      --scheme per_tensor,channel_token,block128 --json "$D/tower_${arm}_$round.json" \
      > "$D/tower_${arm}_$round.log" 2>&1
    echo "tower $arm $round rc=$? s=$(( $(date +%s) - t ))" | tee -a "$D/status.txt"
  done
done
python3 benchmarks/tower_rows.py "$D"
tar -czf "$OUT/c3.tgz" -C "$OUT" c3
t=$(date +%s)
FP8TOWER_CACHE_DIR=/tmp/c3_before timeout "${PREFETCH_S:-90}" python3 benchmarks/bench_prefetch_depth.py \
  --m 1 --schemes per_tensor,channel_token --depths cached,0,1 --json "$OUT/prefetch01.json" \
  > "$OUT/prefetch01.log" 2>&1
echo "prefetch01 rc=$? s=$(( $(date +%s) - t ))"
tail -3 "$OUT/prefetch01.log"
