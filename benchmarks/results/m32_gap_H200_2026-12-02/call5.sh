#!/usr/bin/env bash
# Session 21, device call 5 (.gpu carried, with .gpu/run/old/src = HEAD's src, session 20's
# kernels): the grouped path (block128, weight_only's split x) adds each 128-wide group's
# scaled product one group late, so the wgmma of the next group runs before the wait
# (sm_90 PTX: one wgmma wait per BLOCK_K 256 step instead of two):
# (a) GPU tests: block128 on every backend against the reference, weight_only's split
#     pre-pass, determinism, the priority configs, the launch plans of block128;
# (b) bits: the grouped path's outputs with session 20's kernels and with these (bits.py);
# (c) the merged tower, old / new kernels at the same cached configs (call 4's cache), all
#     three W8A8 schemes, M = 1, 8, 16, 32, two rounds (ab_tower.sh).
set -uo pipefail
FINAL=${OUT:-out}
OUT=/tmp/call5
mkdir -p "$OUT" "$FINAL"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$OUT/status.txt"
export PYTHONUNBUFFERED=1
R=benchmarks/results/m32_gap_H200_2026-12-02
PYTHONPATH=$PWD/src:/tmp/site timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider -n 14 \
  --timeout 150 tests/test_gpu.py tests/test_gpu_plan.py \
  -k "(backends_vs_reference and block128) or weight_only_split or deterministic or priority or (plan and block128)" \
  > "$OUT/tests.log" 2>&1
echo "tests rc=$? s=$(( $(date +%s) - start ))"; tail -3 "$OUT/tests.log"
PYTHONPATH=$PWD/.gpu/run/old/src:/tmp/site timeout 90 python3 $R/bits.py save /tmp/bits_old.pt \
  > "$OUT/bits_old.log" 2>&1
echo "bits old rc=$? s=$(( $(date +%s) - start ))"
PYTHONPATH=$PWD/src:/tmp/site timeout 90 python3 $R/bits.py compare /tmp/bits_old.pt \
  > "$OUT/bits.log" 2>&1
echo "bits new rc=$? s=$(( $(date +%s) - start ))"; head -20 "$OUT/bits.log"
OUT=$OUT OLD_SRC=.gpu/run/old/src CACHE_JSON=$R/call4/retune_ab/nvidia-h200.json TOWER_M=1,8,16,32 \
  TOWER_SCHEMES=per_tensor,channel_token,block128 ROUNDS=2 bash benchmarks/ab_tower.sh 2>&1 | tail -30
echo "total s=$(( $(date +%s) - start ))"
tar -czf "$FINAL/call5.tgz" -C /tmp call5
