#!/usr/bin/env bash
# Session 32's one device call (carry [".gpu"]; session 31's src first goes into the ignored
# .gpu: rm -rf .gpu/old && mkdir -p .gpu/old && git archive 7aebef7 src | tar -x -C .gpu/old):
#  1. the GPU test suite over this session's audit fixes (tests/test_gpu_cuda_backends.py left
#     out: it passed on an H200 during the session, 209 + 114 passed; so did the stream GPU
#     tests, 384 passed);
#  2. per_tensor's in-GEMM quantization, exact division (this tree) against session 31's
#     x * (1/s) (.gpu/old/src = 7aebef7's src), runs new, old, new again.
#   OUT=$OUT bash benchmarks/results/audit2_H200_2026-12-05/call1.sh
set -uo pipefail
FINAL=${OUT:-out}
O=$FINAL/call1
mkdir -p "$O"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
B=benchmarks/results/audit2_H200_2026-12-05/bench_div.py
NEW=$PWD/src:/tmp/site; OLD=$PWD/.gpu/old/src:/tmp/site
for tag in new old new2; do
  P=$NEW; [ $tag = old ] && P=$OLD
  OUT=$O PYTHONPATH=$P FP8TOWER_CACHE_DIR=/tmp/c_$tag timeout 50 python3 $B $tag > "$O/bench_$tag.log" 2>&1
  echo "bench $tag rc=$?"
done
python3 - "$O" <<'PY'
import json, os, sys
rows = {}
for tag in ("new", "old", "new2"):
    for line in open(os.path.join(sys.argv[1], f"bench_{tag}.log")):
        if line.startswith("{"):
            r = json.loads(line); rows.setdefault((r["m"], r["n"], r["k"], r["role"]), {})[tag] = r["median_us"]
for key, v in rows.items():
    print(key, v, "new/old %.3f" % (v["new"] / v["old"]) if "new" in v and "old" in v else "")
PY
PYTHONPATH=$PWD/src:/tmp/site FP8TOWER_CACHE_DIR=/tmp/c_tests timeout 270 python3 -m pytest -q -m gpu \
  -p no:cacheprovider -n 14 --timeout 200 -rfEs --ignore tests/test_gpu_cuda_backends.py \
  --ignore tests/test_stream_backend.py tests \
  2>&1 | tee "$O/tests.log" | tail -45
echo "tests rc=${PIPESTATUS[0]}"
tar czf "$FINAL/call1.tgz" -C "$FINAL" call1
