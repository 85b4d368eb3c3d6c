#!/usr/bin/env bash
# Session 37, one device call (starts kept failing), most valuable first; every step packs
# $OUT/callAB.tgz, so a call cut short keeps what ran. Carry [".gpu/run"].
#   OUT=$OUT bash benchmarks/results/session37_H200_2026-12-05/callAB.sh
# (1) per_tensor with the producer-fused stand-in (--standin rows_fp8: the sum quantized for
#     the next GEMM in the stand-in's kernel, no pre-pass) against --standin rows, arm after
#     arm twice, M = 1, 8, 16, 32, on session 26's cache restamped (the FP8-x keys of the
#     GEMMs after a stand-in are tuned by the first rows_fp8 run);
# (2) the M = 32 keys of all three schemes retuned in context from that cache (benchmarks/
#     retune_ab.sh: its decisions, one round of the M = 32 tower before / after);
# (3) #12's tower on the retuned cache, M = 1, 8, 16, 32, all three schemes, 2 rounds:
#     torch's stand-in (auto and cuBLASLt), then --standin rows (auto);
# (4) a cold tune's time (per_tensor, 7 M buckets, no CUTLASS library given), time allowing.
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-575}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
CACHE=benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json
FINAL=${OUT:-out}
O=$FINAL/callAB
mkdir -p "$O" .gpu/run/cache
pack() { tar czf "$FINAL/callAB.tgz" -C "$FINAL" callAB; }
tar xJf .gpu/run/prebuilt.tar.xz -C .gpu/run/cache
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
rm -rf /tmp/s26 && mkdir -p /tmp/s26 && cp -r .gpu/run/cache/. /tmp/s26/
python3 benchmarks/restamp_cache.py $CACHE /tmp/s26 > "$O/restamp.log" 2>&1
tower() {  # cache dir, name, limit, then bench tower options
  local dir=$1 name=$2 lim=$3 l; shift 3
  l=$(( $(left) - 5 )); [ "$l" -lt "$lim" ] && lim=$l
  if [ "$lim" -lt 20 ]; then echo "tower $name skipped: no time left" | tee -a "$O/status.txt"; return; fi
  FP8TOWER_CACHE_DIR=$dir timeout "$lim" python3 -m fp8tower bench tower --model qwen3.5-27b \
    --arms merged --m 1,8,16,32 "$@" --json "$O/tower_$name.json" > "$O/tower_$name.log" 2>&1
  echo "tower $name rc=$? t=$(( $(date +%s) - T0 ))" | tee -a "$O/status.txt"
  pack
}
# (1)
tower /tmp/s26 pt_rows_1 60 --backends auto --scheme per_tensor --rounds 1 --standin rows
tower /tmp/s26 pt_fp8_1 90 --backends auto --scheme per_tensor --rounds 1 --standin rows_fp8
tower /tmp/s26 pt_rows_2 60 --backends auto --scheme per_tensor --rounds 1 --standin rows
tower /tmp/s26 pt_fp8_2 60 --backends auto --scheme per_tensor --rounds 1 --standin rows_fp8
python3 benchmarks/tower_rows.py "$O" 2>&1 | tee "$O/tower_rows_ab.txt"
FP8TOWER_CACHE_DIR=/tmp/s26 python3 -m fp8tower dispatch --explain > "$O/explain_s26.log" 2>&1 || true
cp /tmp/s26/nvidia-h200.json "$O/cache_s26_after_fp8.json" 2>/dev/null
pack
# (2)
L=$(( $(left) - 160 ))  # keep about 160 s for (3)
if [ "$L" -gt 90 ]; then
  [ "$L" -gt 200 ] && L=200
  rm -rf /tmp/rt && mkdir -p /tmp/rt && cp -r .gpu/run/cache/. /tmp/rt/
  python3 benchmarks/restamp_cache.py $CACHE /tmp/rt > /dev/null 2>&1
  s0=$(date +%s)
  FP8TOWER_CACHE_DIR=/tmp/rt timeout "$L" python3 -m fp8tower tune --model qwen3.5-27b --merged \
    --m 32 --scheme per_tensor,channel_token,block128 --max-configs 4 --in-context --retune \
    --json > "$O/retune.json" 2> "$O/retune.log"
  echo "retune M=32 rc=$? s=$(( $(date +%s) - s0 )) limit=$L" | tee -a "$O/status.txt"
  cp /tmp/rt/nvidia-h200.json "$O/cache_retuned.json" 2>/dev/null
  pack
  # (3)
  tower /tmp/rt torch 150 --backends cublaslt,auto --scheme per_tensor,channel_token,block128 --rounds 2
  tower /tmp/rt rows 100 --backends auto --scheme per_tensor,channel_token,block128 --rounds 2 --standin rows
  python3 benchmarks/tower_rows.py "$O" 2>&1 | tee "$O/tower_rows.txt"
fi
# (4)
L=$(left); [ "$L" -gt 150 ] && L=150
if [ "$L" -gt 60 ]; then
  rm -rf /tmp/sc && mkdir -p /tmp/sc
  s0=$(date +%s%N)
  FP8TOWER_CACHE_DIR=/tmp/sc timeout "$L" python3 -m fp8tower tune --model qwen3.5-27b --merged \
    --m 1,2,4,8,16,32,64 --scheme per_tensor --json > "$O/tune_cold.json" 2> "$O/tune_cold.log"
  echo "cold tune per_tensor rc=$? s=$(( ($(date +%s%N) - s0) / 1000000 ))ms limit=$L" | tee -a "$O/status.txt"
fi
pack
echo "total t=$(( $(date +%s) - T0 ))"
cat "$O/status.txt"
