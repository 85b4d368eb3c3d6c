#!/usr/bin/env bash
# Session 53's fifth device call (carry .gpu/run; either card, an H200 wanted): #12's tower
# targets with today's code (SCHEMES, default channel_token and block128; the sixth call
# ran SCHEMES=per_tensor into c6): the 27B tower, merged, auto
# tuned in the run from an empty cache dir per scheme, M = 1 / 8 / 32, 2 rounds.
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-420}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/${DIR:-c5}
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
for scheme in ${SCHEMES:-channel_token block128}; do
  unpack_prebuilt .gpu/run "/tmp/tw_$scheme"
  FP8TOWER_CACHE_DIR=/tmp/tw_$scheme timeout -k 10 "$(lim 200)" \
    python3 -m fp8tower bench tower --model qwen3.5-27b --arms merged --backends auto \
    --scheme "$scheme" --m 1,8,32 --rounds 2 --json "$O/tower_$scheme.json" \
    > "$O/tower_$scheme.log" 2>&1
  echo "tower $scheme rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "│ (per_tensor|channel_token|block128)" "$O/tower_$scheme.log" | head -4
done
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
