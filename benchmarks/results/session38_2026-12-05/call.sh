#!/usr/bin/env bash
# Session 38's device calls, most valuable first; every step packs $OUT/$NAME.tgz, so a call cut
# short keeps what ran. Carry [".gpu/run"].
#   OUT=$OUT NAME=call1 STEPS=retune,tower,fp8 bash benchmarks/results/session38_2026-12-05/call.sh
# CACHE: the cache the steps start from (default: session 37's, M = 32 retuned in context).
# retune: the M = 8 and 16 keys (RETUNE_M) of all three schemes retuned in context from CACHE
#         (cache_retuned.json: the result, which later steps use);
# tower:  #12's tower on it, M = 1, 8, 16, 32, all three schemes, 2 rounds: torch's stand-in
#         (auto and cuBLASLt), then --standin rows (auto);
# fp8:    per_tensor with --standin rows_fp8 tuned in context at M = 1 and 8 (its FP8-x keys
#         tuned by the step's warm-up, then every key re-ranked in that step), then against
#         --standin rows on the cache it started from, arm after arm twice;
# ab:     rows_fp8 against rows on ONE cache (CACHE: call1's cache_fp8, its M = 1 and 8 keys
#         re-ranked in the rows_fp8 step): the M = 16 and 32 FP8-x keys tuned in that step
#         first, then both arms at M = 1, 8, 16, 32, arm after arm twice;
# ab2:    (for the next session) the like-for-like A/B: rows and rows_fp8 each tuned in its own
#         step (--in-context --standin, M = AB_M, default 1,8,16,32), in separate caches from
#         CACHE, then the two towers arm after arm twice;
# gputests: the GPU tests of the areas session 38's audit fixes changed (tower, in-context
#         tuning, dispatch, tuning), 14 workers;
# cold:   a tune from cold: empty tuning cache (CUTLASS built by nvcc) and an empty Triton
#         cache, per_tensor, 7 M buckets.
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-575}
STEPS=${STEPS:-retune,tower,fp8,ab,cold}
NAME=${NAME:-call}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
has() { [[ ",$STEPS," == *",$1,"* ]]; }
CACHE=${CACHE:-benchmarks/results/session37_H200_2026-12-05/callAB/cache_retuned.json}
FINAL=${OUT:-out}
O=$FINAL/$NAME
mkdir -p "$O" .gpu/run/cache
pack() { tar czf "$FINAL/$NAME.tgz" -C "$FINAL" "$NAME"; }
tar xJf .gpu/run/prebuilt.tar.xz -C .gpu/run/cache
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
echo "steps=$STEPS cache=$CACHE" >> "$O/status.txt"
fresh() {  # dir: the carried libraries and CACHE restamped for this machine and tree
  rm -rf "$1" && mkdir -p "$1" && cp -r .gpu/run/cache/. "$1"/
  python3 benchmarks/restamp_cache.py "$CACHE" "$1" >> "$O/restamp.log" 2>&1
}
fresh /tmp/rt
keep() {  # cache dir, name: its tuning cache file(s) (named by the GPU) as NAME[_file].json
  local f; for f in "$1"/*.json; do
    [ -e "$f" ] && cp "$f" "$O/$2$( [ "$(basename "$f")" = nvidia-h200.json ] || echo "_$(basename "$f" .json)").json"
  done; pack
}
tower() {  # cache dir, name, limit, then bench tower options
  local dir=$1 name=$2 lim=$3 l; shift 3
  l=$(( $(left) - 5 )); [ "$l" -lt "$lim" ] && lim=$l
  if [ "$lim" -lt 20 ]; then echo "tower $name skipped: no time left" | tee -a "$O/status.txt"; return; fi
  FP8TOWER_CACHE_DIR=$dir timeout "$lim" python3 -m fp8tower bench tower --model qwen3.5-27b \
    --arms merged "$@" --json "$O/tower_$name.json" > "$O/tower_$name.log" 2>&1
  echo "tower $name rc=$? t=$(( $(date +%s) - T0 ))" | tee -a "$O/status.txt"
  pack
}
tune() {  # cache dir, name, limit, then tune options
  local dir=$1 name=$2 lim=$3 l s0; shift 3
  l=$(( $(left) - 5 )); [ "$l" -lt "$lim" ] && lim=$l
  if [ "$lim" -lt 30 ]; then echo "tune $name skipped: no time left" | tee -a "$O/status.txt"; return; fi
  s0=$(date +%s%N)
  FP8TOWER_CACHE_DIR=$dir timeout "$lim" python3 -m fp8tower tune --model qwen3.5-27b --merged \
    "$@" --json > "$O/$name.json" 2> "$O/$name.log"
  echo "tune $name rc=$? ms=$(( ($(date +%s%N) - s0) / 1000000 )) limit=$lim t=$(( $(date +%s) - T0 ))" \
    | tee -a "$O/status.txt"
  pack
}
if has retune; then
  tune /tmp/rt retune 230 --m ${RETUNE_M:-8,16} --scheme per_tensor,channel_token,block128 --max-configs 4 \
    --in-context --retune
  keep /tmp/rt cache_retuned
fi
if has tower; then
  tower /tmp/rt torch 150 --m 1,8,16,32 --backends cublaslt,auto \
    --scheme per_tensor,channel_token,block128 --rounds 2
  tower /tmp/rt rows 100 --m 1,8,16,32 --backends auto \
    --scheme per_tensor,channel_token,block128 --rounds 2 --standin rows
  python3 benchmarks/tower_rows.py "$O" > "$O/tower_rows.txt" 2>&1
  pack
fi
if has fp8; then
  rm -rf /tmp/f8 && mkdir -p /tmp/f8 && cp -r /tmp/rt/. /tmp/f8/
  tune /tmp/f8 tune_fp8 150 --m 1,8 --scheme per_tensor --max-configs 4 --in-context \
    --standin rows_fp8
  keep /tmp/f8 cache_fp8
  for r in 1 2; do
    tower /tmp/rt pt_rows_$r 40 --m 1,8 --backends auto --scheme per_tensor --rounds 1 --standin rows
    tower /tmp/f8 pt_fp8_$r 40 --m 1,8 --backends auto --scheme per_tensor --rounds 1 --standin rows_fp8
  done
  python3 benchmarks/tower_rows.py "$O" > "$O/tower_rows.txt" 2>&1
  pack
fi
if has ab; then
  tune /tmp/rt tune_fp8_1632 150 --m 16,32 --scheme per_tensor --max-configs 4 --in-context \
    --standin rows_fp8
  keep /tmp/rt cache_ab
  for r in 1 2; do
    tower /tmp/rt ab_rows_$r 60 --m 1,8,16,32 --backends auto --scheme per_tensor --rounds 1 --standin rows
    tower /tmp/rt ab_fp8_$r 60 --m 1,8,16,32 --backends auto --scheme per_tensor --rounds 1 --standin rows_fp8
  done
  python3 benchmarks/tower_rows.py "$O" > "$O/tower_rows.txt" 2>&1
  pack
fi
if has gputests; then
  s0=$(date +%s)
  timeout $(( $(left) - 5 )) python3 -m pytest -q -m gpu -p no:cacheprovider -n 14 --timeout 150 \
    -rfE tests/test_tower.py tests/test_context.py tests/test_dispatch.py tests/test_tuning.py \
    tests/test_tuning_audit2.py tests/test_tp.py > "$O/gputests.log" 2>&1
  echo "gputests rc=$? s=$(( $(date +%s) - s0 ))" | tee -a "$O/status.txt"
  tail -3 "$O/gputests.log" >> "$O/status.txt"
  pack
fi
if has ab2; then
  fresh /tmp/ra && fresh /tmp/rf
  tune /tmp/ra tune_rows 170 --m ${AB_M:-1,8,16,32} --scheme per_tensor --max-configs 4 \
    --in-context --standin rows
  tune /tmp/rf tune_rows_fp8 170 --m ${AB_M:-1,8,16,32} --scheme per_tensor --max-configs 4 \
    --in-context --standin rows_fp8
  keep /tmp/ra cache_rows && keep /tmp/rf cache_rows_fp8
  for r in 1 2; do
    tower /tmp/ra ab2_rows_$r 60 --m ${AB_M:-1,8,16,32} --backends auto --scheme per_tensor --rounds 1 --standin rows
    tower /tmp/rf ab2_fp8_$r 60 --m ${AB_M:-1,8,16,32} --backends auto --scheme per_tensor --rounds 1 --standin rows_fp8
  done
  python3 benchmarks/tower_rows.py "$O" > "$O/tower_rows.txt" 2>&1
  pack
fi
if has cold; then
  rm -rf /tmp/sc /tmp/tcold && mkdir -p /tmp/sc /tmp/tcold
  TRITON_CACHE_DIR=/tmp/tcold tune /tmp/sc tune_cold 200 --m 1,2,4,8,16,32,64 --scheme per_tensor
fi
pack
echo "total t=$(( $(date +%s) - T0 ))"
cat "$O/status.txt"
