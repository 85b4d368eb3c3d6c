#!/usr/bin/env bash
# Session 59's third device call (carry .gpu/run, with configs_old.py as twins.sh says): the
# 27B tower, merged + auto, tuned from cold per arm with the tuner with the winner's twins
# ("new", this tree) and without ("old", configs_old.py swapped in), then both arms' towers
# timed again on their caches in the order old, new (the drift between the first and second
# timing of an arm shows the machine's). SCHEMES (default per_tensor block128), M = 1 / 8 / 32.
# Outputs: ab/status.txt, ab.tgz (tower_{scheme}_{arm}{,2}.json and .log: at most 8 files come back).
#   BUDGET=520 OUT=$OUT bash benchmarks/results/session59_2026-12-07/tower_ab.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-520}"
O=$OUT/ab
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
CFG=src/fp8tower/kernels/configs.py
[ -f .gpu/run/configs_old.py ] || { echo "no configs_old.py: stopped" | tee -a "$O/status.txt"; exit 1; }
cp "$CFG" /tmp/configs_new.py
tower() {  # scheme arm tag
  cp "/tmp/configs_$2.py" "$CFG"
  FP8TOWER_CACHE_DIR=/tmp/ab_$1_$2 timeout -k 10 "$(lim 120)" python3 -m fp8tower bench tower \
    --model qwen3.5-27b --arms merged --backends auto --scheme "$1" --m 1,8,32 --rounds 2 \
    --json "$O/tower_$1_$2$3.json" > "$O/tower_$1_$2$3.log" 2>&1
  echo "$1 $2$3 rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "│ $1" "$O/tower_$1_$2$3.log" | head -3
}
cp .gpu/run/configs_old.py /tmp/configs_old.py
for scheme in ${SCHEMES:-per_tensor block128}; do
  for arm in new old; do cold_cache .gpu/run "/tmp/ab_${scheme}_$arm"; tower "$scheme" $arm ""; done
  for arm in old new; do tower "$scheme" $arm 2; done
done
cp /tmp/configs_new.py "$CFG"
(cd "$O" && tar czf ab.tgz ./*.log ./*.json && rm -f ./*.log ./*.json)
