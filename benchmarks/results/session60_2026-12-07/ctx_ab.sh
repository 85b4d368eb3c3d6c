#!/usr/bin/env bash
# Session 60's second and third device calls (carry .gpu/run): does re-ranking in the step
# (tune --in-context) beat the tuner's chain alone on the 27B tower today? Per scheme
# (SCHEMES, default per_tensor), at MS (default 1,8,32): the merged tower tuned from cold in
# `bench tower` ("iso"), that cache copied and re-ranked by `tune --model qwen3.5-27b
# --merged --in-context` ("ctx"), then both towers timed again alternated (iso, ctx, ctx,
# iso). The folder is DIR (default ctx; the third call's files were renamed ctx2/ here).
# Outputs: DIR/status.txt, DIR/ctx.tgz (tower JSON and logs, tune_ctx JSON, both caches).
#   BUDGET=560 OUT=$OUT bash benchmarks/results/session60_2026-12-07/ctx_ab.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-560}"
O=$OUT/${DIR:-ctx}
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
tower() {  # scheme arm tag
  FP8TOWER_CACHE_DIR=/tmp/ctx_$1_$2 timeout -k 10 "$(lim 120)" python3 -m fp8tower bench tower \
    --model qwen3.5-27b --arms merged --backends auto --scheme "$1" --m "${MS:-1,8,32}" \
    --rounds 2 \
    --json "$O/tower_$1_$2$3.json" > "$O/tower_$1_$2$3.log" 2>&1
  echo "$1 $2$3 rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "│ $1" "$O/tower_$1_$2$3.log" | head -4
}
for scheme in ${SCHEMES:-per_tensor}; do
  cold_cache .gpu/run "/tmp/ctx_${scheme}_iso"
  tower "$scheme" iso ""
  rm -rf "/tmp/ctx_${scheme}_ctx" && cp -r "/tmp/ctx_${scheme}_iso" "/tmp/ctx_${scheme}_ctx"
  s=$(date +%s)
  FP8TOWER_CACHE_DIR=/tmp/ctx_${scheme}_ctx timeout -k 10 "$(lim 240)" python3 -m fp8tower tune \
    --model qwen3.5-27b --merged --m "${MS:-1,8,32}" --scheme "$scheme" --in-context --json \
    > "$O/tune_ctx_$scheme.json" 2> "$O/tune_ctx_$scheme.log"
  echo "$scheme in-context rc=$? in $(( $(date +%s) - s ))s left=$(left)" | tee -a "$O/status.txt"
  cp /tmp/ctx_${scheme}_iso/*.json "$O/cache_${scheme}_iso.json" 2>/dev/null
  cp /tmp/ctx_${scheme}_ctx/*.json "$O/cache_${scheme}_ctx.json" 2>/dev/null
  tower "$scheme" ctx ""; tower "$scheme" ctx 2; tower "$scheme" iso 2
done
(cd "$O" && tar czf ctx.tgz ./*.log ./*.json && rm -f ./*.log ./*.json)
