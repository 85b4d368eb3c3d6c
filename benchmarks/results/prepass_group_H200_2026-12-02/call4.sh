#!/usr/bin/env bash
# Session 20, device call 4 (.gpu carried), the tree with both rules (act_quant.per_tensor_group:
# about 32 pre-pass programs; configs.min_split_steps: 4 K steps a split at M >= 64):
# (a) GPU tests: every backend against the reference at M = 64 (tests/test_gpu.py), launch
#     plans (tests/test_gpu_plan.py);
# (b) the merged tower, per_tensor, pre-pass at 2048 against the rule, M = 1, 8, 16, 32
#     (session 18's cache);
# (c) per_tensor and weight_only at M = 64 on the shapes whose split changed: new / old;
# (d) session 18's cache against the same retuned in context with this tree (per_tensor).
set -uo pipefail
FINAL=${OUT:-out}
OUT=/tmp/call4
mkdir -p "$OUT" "$FINAL"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$OUT/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c18
CACHE=benchmarks/results/deep_default_H200_2026-12-02/call3/retune_ab/nvidia-h200.json
mkdir -p /tmp/c18 && cp -r .gpu/run/cache/. /tmp/c18/
python3 benchmarks/restamp_cache.py $CACHE /tmp/c18 > "$OUT/restamp.log" 2>&1
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -n 14 --timeout 120 tests/test_gpu.py \
  tests/test_gpu_plan.py -k "64 or plan" > "$OUT/tests.log" 2>&1
echo "tests rc=$? s=$(( $(date +%s) - start ))"; tail -3 "$OUT/tests.log"
timeout 100 python3 benchmarks/bench_prepass_group.py --groups 2048,rule --m 1,8,16,32 \
  --json "$OUT/tower_rule.json" > "$OUT/tower_rule.log" 2>&1
echo "tower_rule rc=$? s=$(( $(date +%s) - start ))"
python3 -c "
import json
for r in json.load(open('$OUT/tower_rule.json'))['rows']:
    print(r['m'], {a: (v['ms'], v['over_first'], v['runs'], v['bits_equal_first']) for a, v in r['arms'].items()})"
for spec in 1280x8192:13 2048x4096:8 1024x5120:10 1024x4096:8 5120x2048:3; do
  IFS=: read -r shape old <<< "$spec"
  timeout 45 python3 benchmarks/bench_gemm.py --shapes $shape --m 64 --schemes per_tensor,weight_only \
    --replays 10 --backends "cublaslt,untuned,triton,triton[split_k=$old]" \
    --json "$OUT/m64_$shape.json" > "$OUT/m64_$shape.log" 2>&1
  echo "m64 $shape rc=$? s=$(( $(date +%s) - start ))"
done
python3 - "$OUT" <<'PY'
import glob, json, sys
for f in sorted(glob.glob(f"{sys.argv[1]}/m64_*.json")):
    for r in json.load(open(f))["rows"]:
        if "us" in r:
            print(r["scheme"], f"{r['n']}x{r['k']}", r["backend"], r.get("chosen", ""),
                  (r.get("config") or {}).get("split_k"), r["us"], r.get("speedup_vs_cublaslt"))
PY
CACHE_JSON=$CACHE TOWER_M=1,8,16,32 TOWER_SCHEMES=per_tensor RETUNE_S=130 ROUNDS=1 \
  bash benchmarks/retune_ab.sh 2>&1 | grep -v "^    " | tail -30
echo "total s=$(( $(date +%s) - start ))"
tar -czf "$FINAL/call4.tgz" -C /tmp call4
