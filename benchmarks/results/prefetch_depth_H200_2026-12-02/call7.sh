#!/usr/bin/env bash
# Session 17, device call 7 (the last minutes of the budget): per_tensor's merged 27B keys at
# M = 32 tuned per GEMM with the fixed CLI (their channel-scale keys), 120 configs a key, from
# call 5's cache; no in-context pass, no tower (not enough device time left).
set -uo pipefail
OUT=${OUT:-out}
C=/tmp/c7cache
mkdir -p "$OUT/c7" "$C"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$OUT/c7/status.txt"
cp -r .gpu/run/cache/. "$C/"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=$C
python3 benchmarks/restamp_cache.py benchmarks/results/prefetch_depth_H200_2026-12-02/call5/tuning_cache.json "$C"
timeout 110 python3 -m fp8tower tune --model qwen3.5-27b --merged --m 32 --scheme per_tensor \
  --max-configs 120 --retune --no-ceiling --json > "$OUT/c7/tune_m32.json" 2> "$OUT/c7/tune_m32.log"
echo "tune rc=$?"
python3 - "$OUT/c7/tune_m32.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["decisions"]:
    w = r["winner"]
    print(r["key"], w["backend"], json.dumps(w["config"], sort_keys=True), round(w["median_us"], 2),
          [(c["backend"], round(c["median_us"], 2)) for c in r["runners_up"][:2]])
PY
