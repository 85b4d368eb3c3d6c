#!/usr/bin/env bash
# Session 53's fourth device call (carry .gpu/run; either card): call3's eager
# channel_token A/B again, its rounds having spread 30-56 ms (a busy host): the eager
# Qwen3-8B-shaped step at batch 4, merged, untuned, x_rows as committed (on) and forced to
# 0 (off), alternated twice, 7 rounds each.
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-240}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/c4
device_setup .gpu/run "$O"
echo "gpu: $GPU" | tee -a "$O/status.txt"
XOFF=/tmp/x_rows_off
mkdir -p "$XOFF"
printf 'import fp8tower.kernels.fp8_gemm as f\nf.x_rows = lambda *a: 0\n' > "$XOFF/sitecustomize.py"
for i in 1 2; do
  for arm in on off; do
    pp=$PYTHONPATH
    [ $arm = off ] && pp=$XOFF:$PYTHONPATH
    FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 PYTHONPATH=$pp timeout -k 10 "$(lim 60)" \
      python3 -m fp8tower bench generate --model qwen3-8b --batch 4 --context 512 \
      --steps 16 --rounds 7 --arms bf16,fp8:channel_token:merged --no-graph \
      --json "$O/ct_${arm}_$i.json" > "$O/ct_${arm}_$i.log" 2>&1
    echo "ct $arm $i rc=$? left=$(left)" | tee -a "$O/status.txt"
    tail -1 "$O/ct_${arm}_$i.log"
  done
done
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
