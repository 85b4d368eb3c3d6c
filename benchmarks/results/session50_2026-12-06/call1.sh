#!/usr/bin/env bash
# Session 50's first device call (carry .gpu/run), by card. First, on either: the host time
# of an eager per_tensor call whose untuned choice takes x from the pre-pass (the H100's deep
# tile at M <= 8, the H200's deep default at M = 8), before / after this session's one-launch
# twin (FP8TOWER_EAGER_ONE_LAUNCH=0 / 1, alternated twice; call1/host.tgz). Then on an H100:
# session 49's next.sh (the H100 tile's bounds, its x in the GEMM at M = 1, the GPU suite).
# On an H200: the deep tile (configs.small_m_deep, the H100's untuned tile at M <= 8)
# against the H200's untuned choice and the lean cuBLASLt at M = 1-8 on 20 shapes, the
# H200's open cells among them (per_tensor 5120x2048 / 5120x4096 at M = 2 / 4: 0.960-0.971x
# in session 48); then the other open cells (block128 12288x5120 at M = 64, per_tensor
# 10240x5120 at M = 8) with their neighbours; then the GPU suite with what is left.
set -uo pipefail
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
T0=$(date +%s)
BUDGET=${BUDGET:-560}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() {  # the smaller of $1 and what is left, at least 1
  local l=$(( $(left) - 5 )); [ "$l" -lt 1 ] && l=1; [ "$l" -lt "$1" ] && echo "$l" || echo "$1"
}
O=$OUT/call1
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
unpack_prebuilt .gpu/run /tmp/un
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
echo "gpu: $GPU" | tee -a "$O/status.txt"
for i in 1 2; do
  for on in 0 1; do
    FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 FP8TOWER_EAGER_ONE_LAUNCH=$on \
      timeout "$(lim 60)" python3 benchmarks/bench_host.py --shapes 4096x4096,5120x4096 \
      --m 1,8 --backend auto --calls 1000 --rounds 5 --json "$O/host_${on}_$i.json" \
      > "$O/host_${on}_$i.log" 2>&1
    echo "host one_launch=$on round $i rc=$? left=$(left)" | tee -a "$O/status.txt"
    grep "per_tensor static planned" "$O/host_${on}_$i.log"
  done
done
(cd "$O" && tar czf host.tgz host_* && rm -f host_*)  # the tool returns 8 files a call
case "$GPU" in
  *H100*) BUDGET=$(left) exec bash benchmarks/results/session49_2026-12-06/next.sh ;;
esac
unpack_prebuilt .gpu/run ~/.cache/fp8tower tests/.cache
run() {  # NAME LIMIT bench_gemm.py args...
  local name=$1 l=$2; shift 2
  FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "$(lim "$l")" python3 \
    benchmarks/bench_gemm.py "$@" --precompile --replays 10 --rounds 3 --json "$O/$name.json" \
    > "$O/$name.log" 2>&1
  echo "$name rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -A12 "slower than" "$O/$name.log" | head -12
}
S=5120x2048,5120x4096,4096x2048,4096x4096,4096x14336,5120x8192,10240x5120,2048x4096
S=$S,6144x4096,8192x8192,9216x7168,28672x4096,34816x5120,1024x5120,1280x8192,37888x3584
S=$S,22016x4096,14336x4096,18944x2048,12800x5120
run h200_deep 220 --shapes "$S" --m 1,2,4,8 --schemes per_tensor --backends cublaslt,untuned,deep
run b128_m64 50 --shapes 12288x5120,14336x5120,10240x5120,12288x4096 --m 32,64 \
  --schemes block128 --backends cublaslt,untuned
run pt_m8 40 --shapes 10240x5120,10240x4096,9216x5120,11264x5120 --m 8,16 \
  --schemes per_tensor --backends cublaslt,untuned
l=$(( $(left) - 10 ))
if [ "$l" -gt 60 ]; then
  timeout "$l" python3 -m pytest -q -m gpu -p no:cacheprovider $(pytest_par 12 240) \
    -rfE --tb=short > "$O/suite.log" 2>&1
  echo "gpu suite rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "^(FAILED|ERROR)|passed|failed" "$O/suite.log" | tail -15
fi
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
