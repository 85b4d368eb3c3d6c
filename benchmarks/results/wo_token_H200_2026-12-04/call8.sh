#!/usr/bin/env bash
# Session 26, device call 8: the untuned default below M = 16, per 1x128 group against per
# token (its twin), on an empty cache: the other families at M = 1 / 4 / 8, the tower at
# M = 2 / 4 (call 1 has it at M = 1 / 8).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call8
mkdir -p "$O"
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c8none
timeout 150 python3 benchmarks/bench_gemm.py --shapes families --m 1,4,8 --schemes weight_only \
  --precompile --replays 10 --backends "triton,triton[wo_mode=3]" --json "$O/default_families.json" \
  > "$O/default_families.log" 2>&1
echo "families rc=$?"
timeout 80 python3 benchmarks/bench_gemm.py --shapes tower --m 2,4 --schemes weight_only \
  --precompile --replays 10 --backends "triton,triton[wo_mode=3]" --json "$O/default_tower.json" \
  > "$O/default_tower.log" 2>&1
echo "tower rc=$?"
tar czf "$FINAL/call8.tgz" -C "$FINAL" call8
