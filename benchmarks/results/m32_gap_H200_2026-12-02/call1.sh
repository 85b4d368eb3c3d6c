#!/usr/bin/env bash
# Session 21, device call 1 (.gpu carried: wheels + the CUTLASS libraries of session 20's cache):
# (a) paired traces of the merged 27B tower (auto, session 20's in-context cache restamped):
#     per_tensor M = 1 / 32, channel_token M = 1 / 8 / 32, block128 M = 1 / 32; per op and
#     per kernel (trace attribute, trace diff): where M = 8 / 32 add to M = 1;
# (b) 5120x6144 (out_proj / o_proj) at M = 16 / 32, all three W8A8 schemes: tiles the tuner
#     sampled past (bench_gemm override arms) against auto and cuBLASLt;
# (c) per_tensor's tower with the L2 prefetch before the wait deeper on some shapes only: the
#     GEMM after a stand-in (5120x6144) or the GEMMs after a GEMM (bench_prefetch_depth --only).
set -uo pipefail
FINAL=${OUT:-out}
OUT=/tmp/call1
mkdir -p "$OUT" "$FINAL"
start=$(date +%s)
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$OUT/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c20
CACHE=benchmarks/results/prepass_group_H200_2026-12-02/call4/retune_ab/nvidia-h200.json
mkdir -p /tmp/c20 && cp -r .gpu/run/cache/. /tmp/c20/
python3 benchmarks/restamp_cache.py $CACHE /tmp/c20 > "$OUT/restamp.log" 2>&1
for spec in per_tensor:1 per_tensor:32 channel_token:1 channel_token:8 block128:1 block128:32 \
            channel_token:32; do
  IFS=: read -r sc m <<< "$spec"
  d=/tmp/tr_${sc}_$m
  timeout 90 python3 -m fp8tower trace capture --model qwen3.5-27b --arm merged --backend auto \
    --m $m --scheme $sc --out $d > "$OUT/trace_${sc}_$m.log" 2>&1
  echo "trace $sc $m rc=$? s=$(( $(date +%s) - start ))"
  python3 -m fp8tower trace attribute $d --json "$OUT/attr_${sc}_$m.json" > "$OUT/attr_${sc}_$m.log" 2>&1
  python3 -m fp8tower trace diff $d/trace_8.json.gz $d/trace_136.json.gz --json "$OUT/diff_${sc}_$m.json" \
    > "$OUT/diff_${sc}_$m.log" 2>&1
  cp $d/manifest.json "$OUT/manifest_${sc}_$m.json" 2>/dev/null
done
for sc in per_tensor channel_token block128; do
  python3 -m fp8tower trace compare /tmp/tr_${sc}_1 /tmp/tr_${sc}_32 > "$OUT/compare_${sc}_1_32.log" 2>&1
done
python3 -m fp8tower trace compare /tmp/tr_channel_token_1 /tmp/tr_channel_token_8 \
  > "$OUT/compare_channel_token_1_8.log" 2>&1
echo "traces done s=$(( $(date +%s) - start ))"
ARMS="cublaslt,auto,triton,triton[block_n=32,block_k=512,split_k=1],triton[block_n=32,block_k=256,split_k=2]"
ARMS="$ARMS,triton[block_n=64,block_k=512,split_k=2],triton[block_n=64,block_k=256,split_k=2]"
ARMS="$ARMS,triton[block_n=128,block_k=256,split_k=4,num_warps=8],triton[block_n=128,block_k=256,split_k=3,num_warps=8]"
timeout 170 python3 benchmarks/bench_gemm.py --shapes 5120x6144 --m 16,32 --precompile \
  --schemes per_tensor,channel_token,block128 --backends "$ARMS" --json "$OUT/o_proj_m32.json" \
  > "$OUT/o_proj_m32.log" 2>&1
echo "o_proj rc=$? s=$(( $(date +%s) - start ))"
python3 - "$OUT/o_proj_m32.json" <<'PY'
import json, sys
for r in json.load(open(sys.argv[1]))["rows"]:
    print(r["scheme"], r["m"], r["backend"], r.get("us"), r.get("speedup_vs_cublaslt"), r.get("error", "")[:80])
PY
for only in 5120x6144 16384x5120,14336x5120; do
  timeout 120 python3 benchmarks/bench_prefetch_depth.py --schemes per_tensor --m 1,32 --rounds 4 \
    --only $only --depths cached,4,8,all --json "$OUT/prefetch_$only.json" > "$OUT/prefetch_$only.log" 2>&1
  echo "prefetch $only rc=$? s=$(( $(date +%s) - start ))"
  python3 -c "
import json
for r in json.load(open('$OUT/prefetch_$only.json'))['rows']:
    print(r['scheme'], r['m'], {a: (round(v['ms'], 4), round(v['over_first'], 4), v['bits_equal_first']) for a, v in r['arms'].items()})"
done
echo "total s=$(( $(date +%s) - start ))"
tar -czf "$FINAL/call1.tgz" -C /tmp call1
