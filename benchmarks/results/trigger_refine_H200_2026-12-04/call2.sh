#!/usr/bin/env bash
# Session 25, device call 2: does the tuner leave time on the table next to its choice? Every
# per_tensor key of the 27B tower's nine shapes at M = 1, 8, 16 (cache: scorecard call 2's,
# restamped), timed in the tuner's chain as cached (auto) and with one knob of the cached
# config changed (auto[KEY=VALUE]: split, stages, BLOCK_K, BLOCK_N, layout, how x is taken).
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call2
mkdir -p "$O"
start=$(date +%s)
export PYTHONPATH=$PWD/src PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c25s2
mkdir -p /tmp/c25s2
python3 benchmarks/restamp_cache.py benchmarks/results/scorecard_H200_2026-12-04/call2/tuning_cache.json \
  /tmp/c25s2 > "$O/restamp.log" 2>&1 || { cat "$O/restamp.log"; exit 1; }
A="auto"
for s in 1 2 3 4 5 6 8 10 16; do A="$A,auto[split_k=$s]"; done
for s in 2 3 4 5; do A="$A,auto[num_stages=$s]"; done
for b in 128 256 512; do A="$A,auto[block_k=$b]"; done
A="$A,auto[block_n=64,num_warps=4],auto[block_n=128,num_warps=8],auto[packed=true],auto[packed=false]"
A="$A,auto[prequant=true,pdl=true,prefetch=1],auto[prequant=false,pdl=true,prefetch=1]"
A="$A,auto[prequant=true,pdl=false,prefetch=0],auto[prequant=false,pdl=false,prefetch=0]"
i=0
for shapes in 16384x5120,5120x6144,6144x5120 14336x5120,10240x5120,12288x5120 5120x17408,1024x5120,34816x5120; do
  i=$((i+1))
  timeout 190 python3 benchmarks/bench_gemm.py --shapes $shapes --m 1,8,16 --schemes per_tensor \
    --precompile --replays 10 --chain model --backends "$A" \
    --json "$O/sweep$i.json" > "$O/sweep$i.log" 2>&1
  echo "sweep$i rc=$? s=$(( $(date +%s) - start ))"
  grep -i "precompile\|error\|Traceback" "$O/sweep$i.log" | head -5
done
tar czf "$FINAL/call2.tgz" -C "$FINAL" call2
