#!/usr/bin/env bash
# Session 69's device call (carry .gpu/run): issue #12's "before / after from one run". The
# 27B tower, merged + auto, at M = 1, 8, 32, timed with the code of 2026-11-30 that the
# issue's numbers came from (commit 842f1f3, `git archive 842f1f3 src` in .gpu/run/old; its
# CUTLASS libraries prebuilt by prebuild_old.py in .gpu/run/old/prebuilt.tar.xz) and with this
# checkout, each tuned from cold in its own cache as it was then / is now:
#   before: `tune --model qwen3.5-27b --m 1,8,16,32 --scheme S --max-configs 4` (the issue's
#           verify_h200.sh step), then `bench tower` (one round: it had no --rounds);
#   after:  `bench tower --rounds 2`, which tunes from cold in the run (sessions 62-68).
# Then each timed once more, alternated: before, after; scheme by scheme, in SCHEMES (default
# per_tensor channel_token). Everything in $OUT/ba.tgz beside status.txt (a call brings back
# at most 8 files).
#   BUDGET=590 OUT=$OUT bash benchmarks/results/session69_2026-12-07/before_after.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-590}"
O=/tmp/ba
rm -rf "$O" && mkdir -p "$O"
device_setup .gpu/run "$O"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $GPU" | tee -a "$O/status.txt"
echo "after: $(git rev-parse --short HEAD 2>/dev/null || echo '?'); before: 842f1f3" \
  >> "$O/status.txt"
OLD=$PWD/.gpu/run/old/src
cold_cache .gpu/run /tmp/after
cold_cache .gpu/run/old /tmp/before
arm() {  # src cache name limit args...: python3 -m fp8tower args, that src first on the path
  local src=$1 cache=$2 name=$3 l=$4 t=$(date +%s)
  shift 4
  PYTHONPATH=$src:/tmp/site FP8TOWER_CACHE_DIR=$cache timeout -k 10 "$(lim "$l")" \
    python3 -m fp8tower "$@" > "$O/$name.log" 2>&1
  echo "$name rc=$? s=$(( $(date +%s) - t )) left=$(left)" | tee -a "$O/status.txt"
}
before() { arm "$OLD" /tmp/before "$@"; }
after() { arm "$PWD/src" /tmp/after "$@"; }
T="--model qwen3.5-27b --arms merged --backends auto --m 1,8,32"
for s in ${SCHEMES:-per_tensor channel_token}; do
  before "tune_before_$s" 120 tune --model qwen3.5-27b --m 1,8,16,32 --scheme "$s" --max-configs 4
  before "tower_before_${s}_1" 80 bench tower $T --scheme "$s" --json "$O/tower_before_${s}_1.json"
  after "tower_after_${s}_1" 180 bench tower $T --scheme "$s" --rounds 2 \
    --json "$O/tower_after_${s}_1.json"
  before "tower_before_${s}_2" 60 bench tower $T --scheme "$s" --json "$O/tower_before_${s}_2.json"
  after "tower_after_${s}_2" 60 bench tower $T --scheme "$s" --rounds 2 \
    --json "$O/tower_after_${s}_2.json"
done
for d in before after; do
  for f in /tmp/$d/*.json; do [ -f "$f" ] && cp "$f" "$O/cache_${d}_$(basename "$f")"; done
done
cp "$O/status.txt" "$OUT/"
tar czf "$OUT/ba.tgz" -C /tmp ba
