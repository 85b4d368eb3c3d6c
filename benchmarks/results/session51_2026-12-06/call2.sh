#!/usr/bin/env bash
# Session 51's second call (carry .gpu/run; a warm H100 after call1): the eager
# Qwen3-8B-shaped step, bf16 against merged per_tensor untuned, the one-launch twin on, then
# off (call1 ran off, then on).
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-200}"
O=$OUT/g2
mkdir -p "$O"
[ -d /tmp/site ] || install_wheels .gpu/run "$O/status.txt"
[ -d /tmp/un ] || unpack_prebuilt .gpu/run /tmp/un ~/.cache/fp8tower tests/.cache
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
for on in 1 0; do
  FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 FP8TOWER_EAGER_ONE_LAUNCH=$on \
    timeout -k 10 "$(lim 80)" python3 -m fp8tower bench generate --model qwen3-8b --batch 1 \
    --context 512 --steps 16 --rounds 5 --arms bf16,fp8:per_tensor:merged --no-graph \
    --json "$O/gen_$on.json" > "$O/gen_$on.log" 2>&1
  echo "on=$on rc=$? left=$(left)"
  tail -2 "$O/gen_$on.log"
done
