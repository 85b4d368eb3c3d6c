#!/usr/bin/env bash
# Session 70's step call (prepared; carry .gpu/run with prebuilt.tar.xz and cluster.tar.xz):
# the 27B merged tower tuned from cold (`bench tower`, per_tensor and channel_token, M = 1, 8,
# 32), then cluster_step.py: its two wide GEMMs on CUTLASS pf with a 1-, 2- or 4-CTA cluster
# against the tuned choices, arms alternated over 3 rounds (step.json). Run it after call2.sh
# where a cluster build ran bit-equal and ahead of the cluster-less one in the chain.
#   BUDGET=590 OUT=$OUT bash benchmarks/results/session70_2026-12-08/call3.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-590}"
O=/tmp/cs
rm -rf "$O" && mkdir -p "$O"
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
cold_cache .gpu/run /tmp/csc
tar xJf .gpu/run/cluster.tar.xz -C /tmp/csc
export FP8TOWER_CACHE_DIR=/tmp/csc
for s in per_tensor channel_token; do
  t=$(date +%s)
  timeout -k 10 "$(lim 150)" python3 -m fp8tower bench tower --model qwen3.5-27b --arms merged \
    --backends auto --m 1,8,32 --scheme "$s" --json "$O/tower_$s.json" > "$O/tower_$s.log" 2>&1
  echo "tower_$s rc=$? s=$(( $(date +%s) - t )) left=$(left)" | tee -a "$O/status.txt"
done
t=$(date +%s)
FP8TOWER_TUNE=0 timeout -k 10 "$(lim 330)" python3 \
  benchmarks/results/session70_2026-12-08/cluster_step.py --schemes per_tensor,channel_token \
  --m 1,8,32 --arms cached,c1,c2,c4 --rounds 3 --json "$O/step.json" > "$O/step.log" 2>&1
echo "step rc=$? s=$(( $(date +%s) - t )) left=$(left)" | tee -a "$O/status.txt"
for f in /tmp/csc/*.json; do [ -f "$f" ] && cp "$f" "$O/cache_$(basename "$f")"; done
cp "$O/status.txt" "$OUT/"
tar czf "$OUT/cs.tgz" -C /tmp cs
