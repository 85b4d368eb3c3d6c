#!/usr/bin/env bash
# The next session's first device call, prepared in session 49 (no machine could start for
# it; carry .gpu/run; on an H100): the H100's untuned choice at M <= 8 ("untuned":
# configs.small_m_deep as shipped, the shared default where it does not apply) against the
# lean cuBLASLt, the shared default ("rule") and the deep tile ("deep"), on the edges of its
# bounds: 133-160 tiles around 9216x7168 (the deep tile lost there in call2: the shared
# default serves 133-159), few tiles of long rows around 1280x8192 (lost to the split
# default), and more over 160 tiles; then at M = 1 the deep tile with x in the GEMM
# ("deep_own", one launch) against the pair ("deep"); then the GPU suite with what is left.
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-560}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
lim() { local l=$(( $(left) - 5 )); [ "$l" -lt 1 ] && l=1; [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
O=$OUT/next
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
unpack_prebuilt .gpu/run /tmp/un ~/.cache/fp8tower tests/.cache
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader)" | tee -a "$O/status.txt"
run() {  # NAME LIMIT bench_gemm.py args...
  local name=$1 l=$2; shift 2
  FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "$(lim "$l")" python3 \
    benchmarks/bench_gemm.py "$@" --precompile --replays 10 --rounds 3 --json "$O/$name.json" \
    > "$O/$name.log" 2>&1
  echo "$name rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -A12 "slower than" "$O/$name.log" | head -12
}
A=9216x7168,9216x4096,9216x5120,9216x8192,8704x7168,9728x7168,10240x7168,9216x14336
A=$A,1280x8192,1280x5120,1280x6144,1280x12288,1024x8192,1024x14336,1536x8192,1152x8192
A=$A,1024x7168,37888x3584,22016x4096,27648x5120,12800x5120,14336x4096,20480x7168,18944x2048
run edges 170 --shapes "$A" --m 1,2,4,8 --schemes per_tensor \
  --backends cublaslt,untuned,rule,deep
S=4096x2048,4096x4096,4096x14336,5120x2048,5120x4096,5120x8192,5120x17408,2048x4096
S=$S,1024x5120,10240x5120,6144x4096,8192x8192,9216x7168,28672x4096,34816x5120,1024x4096
run m1_own 70 --shapes "$S" --m 1 --schemes per_tensor --backends cublaslt,deep,deep_own,rule
l=$(( $(left) - 10 ))
if [ "$l" -gt 60 ]; then
  timeout "$l" python3 -m pytest -q -m gpu -p no:cacheprovider $(pytest_par 12 240) \
    -rfE --tb=short > "$O/suite.log" 2>&1
  echo "gpu suite rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "^(FAILED|ERROR)|passed|failed" "$O/suite.log" | tail -15
fi
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
