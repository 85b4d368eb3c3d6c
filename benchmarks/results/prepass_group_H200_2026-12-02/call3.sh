#!/usr/bin/env bash
# Session 20, device call 3 (.gpu carried), with configs.min_split_steps (block128 at M >= 64:
# at least 4 K steps a split): (a) per changed shape at M = 64, the new default against the
# old split and cuBLASLt, block128 and channel_token (is the rule one for it too?);
# (b) the merged tower with per_tensor's pre-pass at 2048 / 4096 / 8192 elements a program
# (session 18's cache); (c) GPU tests of every backend against the reference, block128 at
# M = 64 (tests/test_gpu.py).
set -uo pipefail
FINAL=${OUT:-out}
OUT=/tmp/call3
mkdir -p "$OUT" "$FINAL"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$OUT/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c18
mkdir -p /tmp/c18 && cp -r .gpu/run/cache/. /tmp/c18/
python3 benchmarks/restamp_cache.py benchmarks/results/deep_default_H200_2026-12-02/call3/retune_ab/nvidia-h200.json \
  /tmp/c18 > "$OUT/restamp.log" 2>&1
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider -n 14 --timeout 100 tests/test_gpu.py \
  -k "block128 and 64" > "$OUT/tests.log" 2>&1
echo "tests rc=$? s=$(( $(date +%s) - start ))"; tail -2 "$OUT/tests.log"
# shape old-split new-split (block128 at M = 64)
for spec in 1280x8192:13:8 2048x4096:8:4 1024x5120:10:5 1024x4096:8:4 5120x2048:3:2; do
  IFS=: read -r shape old new <<< "$spec"
  timeout 60 python3 benchmarks/bench_gemm.py --shapes $shape --m 64 --schemes block128,channel_token \
    --replays 10 --backends "cublaslt,untuned,triton,triton[split_k=$old],triton[split_k=$new]" \
    --json "$OUT/m64_$shape.json" > "$OUT/m64_$shape.log" 2>&1
  echo "m64 $shape rc=$? s=$(( $(date +%s) - start ))"
  grep -E "(block128|channel_token) " "$OUT/m64_$shape.log" | sed 's/ \+/ /g'
done
timeout 120 python3 benchmarks/bench_prepass_group.py --groups 2048,4096,8192 --m 1,8,32 \
  --json "$OUT/tower_groups_big.json" > "$OUT/tower_groups_big.log" 2>&1
echo "tower_groups_big rc=$? s=$(( $(date +%s) - start ))"
python3 -c "
import json
for r in json.load(open('$OUT/tower_groups_big.json'))['rows']:
    print(r['m'], {a: (v['ms'], v['over_first'], v['runs'], v['bits_equal_first']) for a, v in r['arms'].items()})"
echo "total s=$(( $(date +%s) - start ))"
tar -czf "$FINAL/call3.tgz" -C /tmp call3
