#!/usr/bin/env bash
# Session 39's device calls; every step packs $OUT/$NAME.tgz, so a call cut short keeps what
# ran. Calls 1-3 carried [".gpu/run"]; since this session's results the tree is too large for
# that: carry ".gpu/run/prebuilt.tar.xz" and the wheels a step needs (the CUTLASS one; suite:
# pytest_timeout, pytest_xdist, execnet).
#   OUT=$OUT NAME=call2 STEPS=untuned,traces bash benchmarks/results/session39_2026-12-05/call.sh
# untuned: the untuned default against cuBLASLt on session 19's 29 shapes (Llama-3.1, Qwen3,
#          the 27B's) x M = 1-64 x the three W8A8 schemes, with an empty tuning cache: the rule
#          was measured on H200s; does it hold on this card?
# rule:    the same against the untuned rule as on the H200 (bench_gemm's arm rule: what untuned
#          serves on the GPUs the rule was measured on), RULE_RUNS runs (run order effects);
# heldout: the H100's own rule (dispatch.UNTUNED_RULE_GPUS now holds it: "untuned") and the
#          H200's ("rule") against cuBLASLt on 20 shapes that rule_* did not measure
#          (tensor-parallel shards of Llama-3.1-70B, Qwen3.5-27B and Qwen3-8B; DeepSeek-V3's),
#          M = 1-64, the three W8A8 schemes;
# losers:  (for an H200) the cells the H100 rule defers, and their neighbours, against cuBLASLt
#          with the H200's rule (untuned = rule there): do the H100's deferrals hold on it?
# ooms:    the suite's three tests that ran out of memory beside 13 other workers, alone;
# traces:  the paired trace (8 / 136 steps) of the merged 27B tower, per_tensor, M = 1, on
#          call 1's caches (tuned in context on this card; TRACE_ROWS_CACHE, TRACE_FP8_CACHE): torch's and rows' stand-ins on
#          cache_rows, rows_fp8 on cache_rows_fp8; each attributed (us a call beyond the
#          bytes), then rows against rows_fp8 compared;
# suite:   the whole GPU test suite (pytest -m gpu, 14 workers), as session 38's gpu_tests.sh.
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-580}
STEPS=${STEPS:-untuned,traces}
NAME=${NAME:-call}
R=benchmarks/results/session39_2026-12-05
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
has() { [[ ",$STEPS," == *",$1,"* ]]; }
lim() { local l=$(( $(left) - 5 )); [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
FINAL=${OUT:-out}
O=$FINAL/$NAME
mkdir -p "$O" .gpu/run/cache
pack() { tar czf "$FINAL/$NAME.tgz" -C "$FINAL" "$NAME"; }
tar xJf .gpu/run/prebuilt.tar.xz -C .gpu/run/cache
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
echo "steps=$STEPS" >> "$O/status.txt"
fresh() {  # dir cache: the carried libraries and CACHE restamped for this machine and tree
  rm -rf "$1" && mkdir -p "$1" && cp -r .gpu/run/cache/. "$1"/
  [ -z "${2:-}" ] || python3 benchmarks/restamp_cache.py "$2" "$1" >> "$O/restamp.log" 2>&1
}
SHAPES=6144x4096,4096x4096,1024x4096,28672x4096,4096x14336,24576x4096,4096x12288,10240x5120
SHAPES=$SHAPES,5120x8192,51200x5120,5120x25600,10240x8192,8192x8192,57344x8192,8192x28672
SHAPES=$SHAPES,1280x8192,8192x1024,7168x8192,8192x3584,5120x2048,2048x4096
SHAPES=$SHAPES,16384x5120,14336x5120,5120x6144,6144x5120,12288x5120,1024x5120,34816x5120,5120x17408
if has untuned; then
  fresh /tmp/un
  s0=$(date +%s)
  FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "$(lim ${UNTUNED_S:-300})" \
    python3 benchmarks/bench_gemm.py --shapes "$SHAPES" --m ${UNTUNED_M:-1,2,4,8,16,32,64} \
    --schemes ${UNTUNED_SCHEMES:-per_tensor,channel_token,block128} --backends cublaslt,untuned \
    --precompile --replays 10 --json "$O/untuned.json" > "$O/untuned.log" 2>&1
  echo "untuned rc=$? s=$(( $(date +%s) - s0 ))" | tee -a "$O/status.txt"
  pack
fi
if has rule; then
  fresh /tmp/un
  for r in $(seq 1 ${RULE_RUNS:-2}); do
    s0=$(date +%s)
    FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "$(lim ${RULE_S:-200})" \
      python3 benchmarks/bench_gemm.py --shapes "$SHAPES" --m ${UNTUNED_M:-1,2,4,8,16,32,64} \
      --schemes ${UNTUNED_SCHEMES:-per_tensor,channel_token,block128} --backends cublaslt,rule \
      --precompile --replays 10 --json "$O/rule_$r.json" > "$O/rule_$r.log" 2>&1
    echo "rule $r rc=$? s=$(( $(date +%s) - s0 ))" | tee -a "$O/status.txt"
    grep -A40 "slower than" "$O/rule_$r.log" | head -40 >> "$O/status.txt"
    pack
  done
fi
if has heldout; then
  HELD=8192x4096,28672x8192,8192x14336,2560x8192,8192x2048,14336x8192,8192x7168,8192x5120
  HELD=$HELD,5120x3072,7168x5120,4096x5120,5120x1536,3584x5120,3072x4096,4096x2048,12288x4096
  HELD=$HELD,4096x6144,1536x7168,4096x7168,18432x7168
  # HELD2 (call5): after call4 added one deferral, 18 shapes (17 new: 5120x3072 repeats) the rule
  # had not been run on (Llama-3.2-3B, Qwen2.5-14B / 72B, Gemma-2-9B / 27B, Phi-3-medium)
  [ -n "${HELD2:-}" ] && HELD=5120x3072,3072x3072,16384x3072,3072x8192,27648x5120,5120x13824,59136x8192,8192x29568,28672x3584,3584x14336,3584x4096,13824x5120,35840x5120,5120x17920,7680x5120,4608x36864,6144x4608,4608x4096
  fresh /tmp/un
  s0=$(date +%s)
  FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "$(lim ${HELD_S:-240})" \
    python3 benchmarks/bench_gemm.py --shapes "$HELD" --m ${UNTUNED_M:-1,2,4,8,16,32,64} \
    --schemes ${UNTUNED_SCHEMES:-per_tensor,channel_token,block128} --backends cublaslt,untuned,rule \
    --precompile --replays 10 --json "$O/heldout.json" > "$O/heldout.log" 2>&1
  echo "heldout rc=$? s=$(( $(date +%s) - s0 ))" | tee -a "$O/status.txt"
  grep -A40 "slower than" "$O/heldout.log" | head -40 >> "$O/status.txt"
  pack
fi
if has losers; then
  LOSE=28672x4096,34816x5120,10240x5120,10240x8192,14336x8192,28672x8192,3072x4096,3072x3072
  LOSE=$LOSE,28672x3584,8192x29568,8192x29312,8192x29440,5120x29568,3072x8192,2560x8192
  fresh /tmp/un
  s0=$(date +%s)
  FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "$(lim 200)" \
    python3 benchmarks/bench_gemm.py --shapes "$LOSE" --m 1,2,8,16,32,64 \
    --schemes per_tensor,channel_token,block128 --backends cublaslt,untuned,rule \
    --precompile --replays 10 --json "$O/losers.json" > "$O/losers.log" 2>&1
  echo "losers rc=$? s=$(( $(date +%s) - s0 ))" | tee -a "$O/status.txt"
  grep -A40 "slower than" "$O/losers.log" | head -40 >> "$O/status.txt"
  pack
fi
if has ooms; then
  fresh /tmp/gt
  FP8TOWER_CACHE_DIR=/tmp/gt timeout "$(lim 150)" python3 -m pytest -q -p no:cacheprovider -rfE \
    "tests/test_gpu.py::test_backends_vs_reference[1-per_tensor-34816x5120]" \
    "tests/test_gpu.py::test_backends_vs_reference[1-per_tensor-5120x17408]" \
    "tests/test_gpu.py::test_weight_only_split_prepass_vs_reference[64-34816x5120]" \
    > "$O/ooms.log" 2>&1
  echo "ooms rc=$?" | tee -a "$O/status.txt"
  tail -2 "$O/ooms.log" >> "$O/status.txt"
  pack
fi
if has traces; then
  fresh /tmp/tr "${TRACE_ROWS_CACHE:-$R/call1/cache_rows_nvidia-h100-80gb-hbm3.json}"
  fresh /tmp/tf "${TRACE_FP8_CACHE:-$R/call1/cache_rows_fp8_nvidia-h100-80gb-hbm3.json}"
  for arm in torch:/tmp/tr rows:/tmp/tr rows_fp8:/tmp/tf; do
    st=${arm%%:*}; dir=${arm#*:}
    FP8TOWER_CACHE_DIR=$dir FP8TOWER_TUNE=0 timeout "$(lim 120)" python3 -m fp8tower trace capture \
      --model qwen3.5-27b --arm merged --backend auto --m 1 --scheme per_tensor --standin "$st" \
      --out "/tmp/trace_$st" > "$O/capture_$st.log" 2>&1
    echo "capture $st rc=$? t=$(( $(date +%s) - T0 ))" | tee -a "$O/status.txt"
    cp "/tmp/trace_$st/manifest.json" "$O/manifest_$st.json" 2>/dev/null
    timeout "$(lim 60)" python3 -m fp8tower trace attribute "/tmp/trace_$st" \
      --json "$O/attr_$st.json" > "$O/attr_$st.log" 2>&1
    echo "attribute $st rc=$?" | tee -a "$O/status.txt"
    pack
  done
  timeout "$(lim 90)" python3 -m fp8tower trace report /tmp/trace_rows /tmp/trace_rows_fp8 \
    --html "$O/report_rows_vs_rows_fp8.html" --json "$O/report_rows_vs_rows_fp8.json" \
    > "$O/report.log" 2>&1
  echo "report rc=$?" | tee -a "$O/status.txt"
  pack
fi
if has suite; then
  fresh /tmp/gt
  s0=$(date +%s)
  FP8TOWER_CACHE_DIR=/tmp/gt timeout "$(lim 400)" python3 -m pytest -q -m gpu -p no:cacheprovider \
    -n 14 --timeout 150 -rfE --durations=15 tests --ignore tests/test_nonfinite.py \
    > "$O/pytest.log" 2>&1
  echo "suite rc=$? s=$(( $(date +%s) - s0 ))" | tee -a "$O/status.txt"
  tail -4 "$O/pytest.log" >> "$O/status.txt"
  pack
fi
pack
echo "total t=$(( $(date +%s) - T0 ))"
cat "$O/status.txt"
