#!/usr/bin/env bash
# Session 20, device call 1 (.gpu carried: wheels, CUTLASS libraries): per_tensor's pre-pass
# group (elements a program, act_quant.PER_TENSOR_GROUP, 2048 in the tree).
# (a) the merged 27B tower with session 18's final cache at groups 2048 ... 128, M = 1, 8, 32;
# (b) per GEMM (bench_gemm --prepass-group): the default, the pair, the deep pair and the
#     tuned choice at groups 2048, 256;
# (c) block128 at M = 64 tuned wide on 1280x8192 (the untuned miss), 1024x5120, 2048x4096;
# (d) the group set to 256 in this call's copy of the tree (sed), then session 18's cache
#     against the same retuned in context (benchmarks/retune_ab.sh), per_tensor, one round.
set -uo pipefail
FINAL=${OUT:-out}
OUT=/tmp/call1  # everything here, packed into $FINAL/call1.tgz (the tool returns few files)
mkdir -p "$OUT" "$FINAL"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$OUT/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c18
CACHE=benchmarks/results/deep_default_H200_2026-12-02/call3/retune_ab/nvidia-h200.json
mkdir -p /tmp/c18 && cp -r .gpu/run/cache/. /tmp/c18/
python3 benchmarks/restamp_cache.py $CACHE /tmp/c18 > "$OUT/restamp.log" 2>&1
timeout 140 python3 benchmarks/bench_prepass_group.py --groups 2048,1024,512,256,128 --m 1,8,32 \
  --json "$OUT/tower_groups.json" > "$OUT/tower_groups.log" 2>&1
echo "tower_groups rc=$? s=$(( $(date +%s) - start ))"
python3 -c "
import json
for r in json.load(open('$OUT/tower_groups.json'))['rows']:
    print(r['m'], {a: (v['ms'], v['over_first'], v['bits_equal_first']) for a, v in r['arms'].items()})"
SHAPES=5120x6144,4096x14336,5120x17408,16384x5120,14336x5120,34816x5120,1024x5120,4096x4096
for g in 2048 256; do
  timeout 100 python3 benchmarks/bench_gemm.py --shapes $SHAPES --m 1,8,32 --schemes per_tensor \
    --backends cublaslt,triton,pair,deep,auto --prepass-group $g --replays 10 \
    --json "$OUT/gemm_$g.json" > "$OUT/gemm_$g.log" 2>&1
  echo "gemm $g rc=$? s=$(( $(date +%s) - start ))"
done
python3 - "$OUT" <<'PY'
import json, sys
rows = {}
for g in (2048, 256):
    for r in json.load(open(f"{sys.argv[1]}/gemm_{g}.json"))["rows"]:
        if "us" in r:
            rows.setdefault((r["n"], r["k"], r["m"], r["backend"]), {})[g] = r["us"]
for key, v in sorted(rows.items()):
    print(*key, *(f"{g}:{v.get(g, float('nan')):.2f}" for g in (2048, 256)))
PY
mkdir -p /tmp/b128 && cp -r .gpu/run/cache/. /tmp/b128/
FP8TOWER_CACHE_DIR=/tmp/b128 timeout 60 python3 -m fp8tower tune --shapes 1280x8192,1024x5120,2048x4096 \
  --m 64 --scheme block128 --max-configs 24 > "$OUT/tune_b128_m64.log" 2>&1
echo "tune_b128_m64 rc=$? s=$(( $(date +%s) - start ))"
mkdir -p "$OUT/tune_b128_m64" && cp /tmp/b128/*.json "$OUT/tune_b128_m64/"
sed -i 's/^PER_TENSOR_GROUP = 2048$/PER_TENSOR_GROUP = 256/' src/fp8tower/kernels/act_quant.py
grep -n "^PER_TENSOR_GROUP" src/fp8tower/kernels/act_quant.py
CACHE_JSON=$CACHE TOWER_M=1,8,32 TOWER_SCHEMES=per_tensor RETUNE_S=130 ROUNDS=1 \
  bash benchmarks/retune_ab.sh 2>&1 | grep -v "^    " | tail -30
echo "total s=$(( $(date +%s) - start ))"
tar -czf "$FINAL/call1.tgz" -C /tmp call1
