#!/usr/bin/env bash
# Session 38: the command run inline (one device call, after tp.sh on the same warm machine):
# the 27B's tp 2 and tp 4 shards for channel_token and block128, tuned from an empty cache and
# timed, auto against merged cuBLASLt. Stored here as it ran (joined from one line).
set -u; O=$OUT/tp2; mkdir -p $O .gpu/run/cache; tar xJf .gpu/run/prebuilt.tar.xz -C .gpu/run/cache
. benchmarks/device_wheels.sh; install_wheels .gpu/run $O/status.txt
export PYTHONPATH=$PWD/src:/tmp/site FP8TOWER_CACHE_DIR=/tmp/tpc2
rm -rf /tmp/tpc2; mkdir -p /tmp/tpc2; cp -r .gpu/run/cache/. /tmp/tpc2/; F="python3 -m fp8tower"; T0=$(date +%s)
for tp in 2 4; do s0=$(date +%s); timeout 150 $F tune --model qwen3.5-27b --tp $tp --merged --m 1,8 --scheme channel_token,block128 --max-configs 4 --json > $O/tune_27b_tp$tp.json 2> $O/tune_27b_tp$tp.log; echo "tune tp$tp rc=$? s=$(( $(date +%s)-s0 ))" | tee -a $O/status.txt
timeout 100 $F bench tower --model qwen3.5-27b --tp $tp --arms merged --m 1,8 --backends cublaslt,auto --scheme channel_token,block128 --rounds 2 --json $O/tower_27b_tp$tp.json > $O/tower_27b_tp$tp.log 2>&1; echo "tower tp$tp rc=$? t=$(( $(date +%s)-T0 ))" | tee -a $O/status.txt; done
python3 benchmarks/tower_rows.py $O | tee $O/tower_rows.txt; tar czf $OUT/tp2.tgz -C $OUT tp2
