#!/usr/bin/env bash
# Session 26, device call 6: the tuner's refinements with the winner's tile unsplit
# (configs.unsplit_twin). (1) weight_only retuned on the tower's shapes as in call 2, then
# the scorecard on call 2's cache and on this one, one after the other; (2) per_tensor on
# session 25's nine shapes of other families tuned from cold (its call 6), what the
# refinement step added read from the candidates (refine_gain.py).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call6
mkdir -p "$O"
start=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1
R=benchmarks/results/wo_token_H200_2026-12-04
SHAPES=34816x5120,5120x17408,16384x5120,14336x5120,12288x5120,10240x5120,6144x5120,5120x6144,1024x5120
mkdir -p /tmp/c6old /tmp/c6new /tmp/c6pt
python3 benchmarks/restamp_cache.py $R/call2/tuning_cache.json /tmp/c6old /tmp/c6new > "$O/restamp.log" 2>&1 \
  || { cat "$O/restamp.log"; exit 1; }
t0=$(date +%s)
FP8TOWER_CACHE_DIR=/tmp/c6new timeout 150 python3 -m fp8tower tune --shapes $SHAPES --m 1,8,16,32 \
  --scheme weight_only --retune > "$O/tune.log" 2>&1
echo "tune rc=$? took $(( $(date +%s) - t0 )) s"
cp /tmp/c6new/*.json "$O/tuning_cache.json"
for arm in old new; do
  FP8TOWER_CACHE_DIR=/tmp/c6$arm timeout 100 python3 benchmarks/bench_gemm.py --shapes tower --m 1,8,16,32 \
    --schemes weight_only --replays 10 --backends auto --json "$O/wo_$arm.json" > "$O/wo_$arm.log" 2>&1
  echo "$arm rc=$? s=$(( $(date +%s) - start ))"
done
FAM=1024x4096,4096x4096,6144x4096,2048x4096,5120x2048,1280x8192,8192x1024,8192x3584,5120x8192
t0=$(date +%s)
FP8TOWER_CACHE_DIR=/tmp/c6pt timeout 170 python3 -m fp8tower tune --shapes $FAM --m 1,8,16,32 \
  --scheme per_tensor --max-configs 4 > "$O/tune_pt.log" 2>&1
echo "tune pt rc=$? took $(( $(date +%s) - t0 )) s"
cp /tmp/c6pt/*.json "$O/tuning_cache_per_tensor.json"
python3 benchmarks/results/trigger_refine_H200_2026-12-04/refine_gain.py "$O/tuning_cache_per_tensor.json" > "$O/refine_gain_pt.log" 2>&1
python3 benchmarks/results/trigger_refine_H200_2026-12-04/refine_gain.py "$O/tuning_cache.json" > "$O/refine_gain_wo.log" 2>&1
tail -1 "$O/refine_gain_pt.log"; tail -1 "$O/refine_gain_wo.log"
tar czf "$FINAL/call6.tgz" -C "$FINAL" call6
