#!/usr/bin/env bash
# Before/after of a change to the tuner's search space in ONE device call: the merged 27B
# tower timed with a carried tuning cache, then retuned (in context) from it with this tree,
# then both caches timed again, arms alternated (before, after, before, after).
#
#   CACHE_JSON=.gpu/run/tuning.json bash benchmarks/retune_ab.sh
#
# CACHE_JSON: a tuning cache (a results tuning_cache.json), stamped with this machine's and
# this tree's metadata (a kernel change since it was made would otherwise make it stale).
# TOWER_M, TOWER_SCHEMES: comma lists (default 1,8 and per_tensor,channel_token); BENCH_M:
# the towers' M list (default TOWER_M); ROUNDS (default 2); MAX_CONFIGS: the tuner's
# --max-configs (default 4); TUNE_ARGS: more tune options (e.g. --full: explore every M
# bucket); RESTAMP_ARGS: restamp_cache.py's options (e.g. --prefetch 1).
# The libraries under $RUN/cache (CUTLASS, stream) go to both caches. JSON and logs in
# $OUT/retune_ab/ (retune.json: its decisions and in-context rows; the retuned cache under
# its own file name, tuning.cache.cache_file_name), packed into $OUT/retune_ab.tgz.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-out}
RUN=${RUN:-.gpu/run}
AB=$OUT/retune_ab
mkdir -p "$AB"
: "${CACHE_JSON:?set CACHE_JSON to a tuning cache}"
. benchmarks/device_wheels.sh
install_wheels "$RUN" "$AB/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
M=${TOWER_M:-1,8}
SCHEMES=${TOWER_SCHEMES:-per_tensor,channel_token}
for arm in before after; do
  mkdir -p "/tmp/rab_$arm"
  [ -d "$RUN/cache" ] && cp -r "$RUN"/cache/. "/tmp/rab_$arm/"
done
python3 benchmarks/restamp_cache.py "$CACHE_JSON" /tmp/rab_before /tmp/rab_after ${RESTAMP_ARGS:-} 2>&1 \
  | tee "$AB/cache.log"
start=$(date +%s)
FP8TOWER_CACHE_DIR=/tmp/rab_after timeout "${RETUNE_S:-330}" python3 -m fp8tower tune \
  --model qwen3.5-27b --merged --m "$M" --scheme "$SCHEMES" --max-configs "${MAX_CONFIGS:-4}" --in-context \
  --retune ${TUNE_ARGS:-} --json > "$AB/retune.json" 2> "$AB/retune.log"
echo "retune rc=$? s=$(( $(date +%s) - start ))" | tee -a "$AB/status.txt"
FP8TOWER_CACHE_DIR=/tmp/rab_after python3 -m fp8tower dispatch --explain > "$AB/explain.log" 2>&1
cp /tmp/rab_after/*.json "$AB/" 2>/dev/null
for round in $(seq 1 "${ROUNDS:-2}"); do
  for arm in before after; do
    FP8TOWER_CACHE_DIR=/tmp/rab_$arm timeout 200 python3 -m fp8tower bench tower \
      --model qwen3.5-27b --m "${BENCH_M:-$M}" --arms merged --backends auto --scheme "$SCHEMES" \
      --json "$AB/tower_${arm}_$round.json" > "$AB/tower_${arm}_$round.log" 2>&1
    echo "$arm round $round rc=$?" | tee -a "$AB/status.txt"
  done
done
python3 - "$AB" <<'EOF'
import json, os, sys
try:  # in context: each key's candidates and the whole step's ms with each
    for r in json.load(open(os.path.join(sys.argv[1], "retune.json"))).get("in_context", []):
        print(r.get("scheme"), "M=%s" % r.get("m"), r["key"], "kept", r.get("kept"))
        for c in r.get("candidates", []):
            print("   ", c["ms"], c["backend"], json.dumps(c["config"], sort_keys=True))
except (OSError, ValueError, KeyError) as e:
    print("no in-context rows:", e)
EOF
python3 benchmarks/tower_rows.py "$AB"
tar -czf "$OUT/retune_ab.tgz" -C "$OUT" retune_ab && rm -rf "$AB"
