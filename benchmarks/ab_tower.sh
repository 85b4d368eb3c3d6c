#!/usr/bin/env bash
# Before/after of a kernel change in ONE device call: the merged 27B tower timed with two
# source trees at the same cached configs, arms alternated (before, after, before, after).
#
#   OLD_SRC=.gpu/run/old/src CACHE_JSON=.gpu/run/tuning.json bash benchmarks/ab_tower.sh
#
# OLD_SRC: the "before" tree's src/ (e.g. `git archive HEAD src | tar -x -C .gpu/run/old`);
# the "after" tree is this checkout's src/. CACHE_JSON: a tuning cache (a results
# tuning_cache.json); each arm gets a copy stamped with its own tree's metadata
# (tuning.cache.environment_meta: the kernel-source hash differs between the trees, so the
# cache would otherwise be ignored as stale). The libraries under $RUN/cache (CUTLASS,
# stream) go to both. TOWER_M, TOWER_SCHEMES, ROUNDS (default 2). JSON and logs in $OUT/ab/,
# packed into $OUT/ab.tgz (the device tool returns at most 8 files: sessions 15 and 16 lost
# the before JSONs), each tower row also printed.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
RUN=${RUN:-.gpu/run}
AB=$OUT/ab
mkdir -p "$AB"
: "${OLD_SRC:?set OLD_SRC to the src/ of the before tree}" "${CACHE_JSON:?set CACHE_JSON to a tuning cache}"
. benchmarks/device_wheels.sh
install_wheels "$RUN" "$AB/status.txt"
declare -A SRC=([before]=$(cd "$OLD_SRC" && pwd) [after]=$PWD/src)
for arm in before after; do
  mkdir -p "/tmp/ab_$arm"
  [ -d "$RUN/cache" ] && cp -r "$RUN"/cache/. "/tmp/ab_$arm/"
  PYTHONPATH=${SRC[$arm]}:/tmp/site python3 benchmarks/restamp_cache.py "$CACHE_JSON" \
    "/tmp/ab_$arm" 2>&1 | tee "$AB/cache_$arm.log"
done
for round in $(seq 1 "${ROUNDS:-2}"); do
  for arm in before after; do
    PYTHONPATH=${SRC[$arm]}:/tmp/site FP8TOWER_CACHE_DIR=/tmp/ab_$arm timeout 300 python3 -m fp8tower \
      bench tower --model qwen3.5-27b --m "${TOWER_M:-1,8}" --arms merged --backends auto \
      --scheme "${TOWER_SCHEMES:-per_tensor,channel_token,block128}" \
      --json "$AB/tower_${arm}_$round.json" > "$AB/tower_${arm}_$round.log" 2>&1
    echo "$arm round $round rc=$?" | tee -a "$AB/status.txt"
  done
done
python3 benchmarks/tower_rows.py "$AB"
tar -czf "$OUT/ab.tgz" -C "$OUT" ab && rm -rf "$AB"
