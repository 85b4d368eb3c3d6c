#!/usr/bin/env bash
# Session 59's fourth device call (carry .gpu/run, with configs_old.py): why the tuner with
# the winner's twins made the per_tensor tower 0.5% slower at M = 1 (call 3, ab/): both arms'
# tuning caches (the tower tuned from cold, as call 3), then, on the new arm's cache, the
# tower with each M = 1 key whose x mode the twins flipped (prequant differs between the two
# caches) set back to the old arm's x mode (bench_override.py, arms alternated, 4 rounds).
# Outputs: x/cache_{new,old}.json (kept here as tuning_cache_{new,old}.json.gz),
# x/override.json, status.txt, logs.tgz.
#   BUDGET=330 OUT=$OUT bash benchmarks/results/session59_2026-12-07/xmode.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-330}"
O=$OUT/x
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
CFG=src/fp8tower/kernels/configs.py
cp "$CFG" /tmp/configs_new.py
cp .gpu/run/configs_old.py /tmp/configs_old.py
for arm in new old; do
  cp "/tmp/configs_$arm.py" "$CFG"
  cold_cache .gpu/run "/tmp/x_$arm"
  FP8TOWER_CACHE_DIR=/tmp/x_$arm timeout -k 10 "$(lim 110)" python3 -m fp8tower bench tower \
    --model qwen3.5-27b --arms merged --backends auto --scheme per_tensor --m 1,8,32 \
    --rounds 2 --json "$O/tower_$arm.json" > "$O/tower_$arm.log" 2>&1
  echo "tower $arm rc=$? left=$(left)" | tee -a "$O/status.txt"
  cp /tmp/x_$arm/*.json "$O/cache_$arm.json"
done
cp /tmp/configs_new.py "$CFG"
ARMS=$(python3 - "$O/cache_new.json" "$O/cache_old.json" <<'PY'
import json, sys
new, old = (json.load(open(f)) for f in sys.argv[1:])
new, old = new.get("entries", new), old.get("entries", old)
flip = {}
for k, e in new.items():
    if not k.startswith("m1_") or "per_tensor" not in k or e.get("backend") != "triton":
        continue
    o = old.get(k) or {}
    pn, po = (e.get("config") or {}).get("prequant"), (o.get("config") or {}).get("prequant")
    if o.get("backend") == "triton" and pn != po:
        p = e["problem"]
        flip.setdefault(str(po).lower(), []).append(f"{p['n']}x{p['k']}")
print("|".join(f"prequant={v}@{'+'.join(s)}" for v, s in flip.items()))
PY
)
echo "flipped at M = 1: ${ARMS:-none}" | tee -a "$O/status.txt"
if [ -n "$ARMS" ]; then
  FP8TOWER_CACHE_DIR=/tmp/x_new timeout -k 10 "$(lim 150)" python3 benchmarks/bench_override.py \
    --schemes per_tensor --m 1 --rounds 4 --arms "cached,$ARMS" --json "$O/override.json" \
    > "$O/override.log" 2>&1
  echo "override rc=$? left=$(left)" | tee -a "$O/status.txt"
  tail -8 "$O/override.log"
fi
(cd "$O" && tar czf logs.tgz ./*.log ./tower_*.json && rm -f ./*.log ./tower_*.json)
