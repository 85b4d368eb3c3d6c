#!/usr/bin/env bash
# Session 66 (carry .gpu/run; an H200 wanted): the per_tensor 27B merged tower tuned from cold
# in-process at MS (default 1,32: session 65's c8, whose tuning held a tie), then the same
# cache in new processes, alternated: new (the tuning run), old, host, host, old, new
# (choices.py's variants: this code / the capture running an eager-only plan's graph choice
# unplanned / FP8TOWER_HOST_TIE=1), 2 rounds each, every key's eager and graph choice dumped.
# Outputs: DIR (default cold)/status.txt, <variant>.json, tuning_cache_cold.json, logs.tgz.
#   BUDGET=330 OUT=$OUT bash benchmarks/results/session66_2026-12-07/cold_ab.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-330}"
O=$OUT/${DIR:-cold}
S=benchmarks/results/session66_2026-12-07
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
cold_cache .gpu/run /tmp/cold
arm() {  # tag variant limit
  FP8TOWER_CACHE_DIR=/tmp/cold timeout -k 10 "$(lim "$3")" python3 $S/choices.py \
    --m "${MS:-1,32}" --scheme "${SCHEME:-per_tensor}" --variant "$2" --out "$O/$1.json" \
    > "$O/$1.log" 2>&1
  echo "$1 rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep "^{'m'" "$O/$1.log"
}
arm new new 150
cp /tmp/cold/*.json "$O/tuning_cache_cold.json"
grep "| graph \[" "$O/new.log"
arm old old 60; arm host host 60; arm host2 host 60; arm old2 old 60; arm new2 new 60
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
