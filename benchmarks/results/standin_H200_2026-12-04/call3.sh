#!/usr/bin/env bash
# Session 22, device call 3 (.gpu carried; session 21's final cache restamped): (a) GPU tests of
# the stand-in option (tests/test_tower.py); (b) paired traces of the merged 27B tower with
# the stride-aware stand-in (`trace capture --standin rows`) at M = 1 and 32, all three W8A8
# schemes, compared op by op: the GEMMs' own M = 32 delta; (c) block128 at M = 16 / 32 with
# BLOCK_N 128 and the pre-pass (not in the tuner's sample for it) against auto.
set -uo pipefail
FINAL=${OUT:-out}
O=/tmp/call3
mkdir -p "$O" "$FINAL"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c22
mkdir -p /tmp/c22 && cp -r .gpu/run/cache/. /tmp/c22/
python3 benchmarks/restamp_cache.py benchmarks/results/m32_gap_H200_2026-12-02/call4/retune_ab/nvidia-h200.json \
  /tmp/c22 > "$O/restamp.log" 2>&1
timeout 120 python3 -m pytest -q -m gpu tests/test_tower.py -p no:cacheprovider > "$O/tests.log" 2>&1
echo "tests rc=$? s=$(( $(date +%s) - start ))"; tail -3 "$O/tests.log"
for spec in per_tensor:1 per_tensor:32 channel_token:1 channel_token:32 block128:1 block128:32; do
  IFS=: read -r sc m <<< "$spec"
  d=/tmp/tr_${sc}_$m
  timeout 90 python3 -m fp8tower trace capture --model qwen3.5-27b --arm merged --backend auto \
    --m $m --scheme $sc --standin rows --out $d > "$O/trace_${sc}_$m.log" 2>&1
  echo "trace $sc $m rc=$? s=$(( $(date +%s) - start ))"
  python3 -m fp8tower trace attribute $d --json "$O/attr_${sc}_$m.json" > "$O/attr_${sc}_$m.log" 2>&1
  cp $d/manifest.json "$O/manifest_${sc}_$m.json" 2>/dev/null
done
for sc in per_tensor channel_token block128; do
  python3 -m fp8tower trace compare /tmp/tr_${sc}_1 /tmp/tr_${sc}_32 > "$O/compare_${sc}_1_32.log" 2>&1
  echo "compare $sc rc=$?"
done
echo "traces done s=$(( $(date +%s) - start ))"
timeout 100 python3 benchmarks/bench_gemm.py --shapes 16384x5120,14336x5120 --m 16,32 \
  --schemes block128 --precompile --replays 10 \
  --backends "auto,triton[block_n=128,num_warps=8,split_k=1],triton[block_n=128,num_warps=4,split_k=1,num_stages=3]" \
  --json "$O/b128_wide_pair.json" > "$O/b128_wide_pair.log" 2>&1
echo "b128_wide_pair rc=$? s=$(( $(date +%s) - start ))"
python3 - "$O/b128_wide_pair.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(r["n"], r["m"], r["backend"], r.get("us"), r.get("error", r.get("skipped", ""))[:80])
PY
tar -czf "$FINAL/call3.tgz" -C /tmp call3
echo "total s=$(( $(date +%s) - start ))"
