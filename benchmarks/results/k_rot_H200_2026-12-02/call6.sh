#!/usr/bin/env bash
# Session 18, device call 6, as it ran (the last 150 s of device time, on call 5's warm
# machine). Meant: the final cache's tower with CUTLASS importable (call 5's final bench
# lacked /tmp/site on PYTHONPATH, so its cache was ignored as "another setup" and the tower
# was tuned from cold without CUTLASS). The restamp read a path of the CPU machine and
# failed, so /tmp/c6 held the CUTLASS and stream libraries only: the tower's warm-up tuned
# every key from cold with this tree (dispatch.pretune, the default --max-configs, CUTLASS
# in). Its files went to ./out (not $OUT) and stayed on the machine: its one output line is
# kept in call6_printed.txt.
mkdir -p out/c6 /tmp/c6 && cp -r .gpu/run/cache/. /tmp/c6/ && . benchmarks/device_wheels.sh && install_wheels .gpu/run out/c6/status.txt && export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1 FP8TOWER_CACHE_DIR=/tmp/c6 && python3 benchmarks/restamp_cache.py /work/.device/5/c5/nvidia-h200.json /tmp/c6 2>&1 | tail -1; ls /tmp/c6; echo; timeout 120 python3 -m fp8tower bench tower --model qwen3.5-27b --m 1,8,16,32 --arms merged --backends auto --scheme per_tensor,channel_token,block128 --json out/c6/tower_final.json > out/c6/tower_final.log 2>&1; echo "tower rc=$?"; python3 benchmarks/tower_rows.py out/c6
