#!/usr/bin/env bash
# The next session's first device call, prepared in session 50 (carry .gpu/run; either card).
# 1. Both: the lead of call1 for the H100's 133-159-tile band (where the shared default serves
#    and three cells at M = 8 lost 2.2-2.5%): the deep tile against it on 12 shapes of the band
#    not timed before, K = 2048-14336, M = 1, 2, 4, 8 ("band").
# 2. H100: the eager Qwen3-8B-shaped step, bf16 against merged per_tensor untuned (its
#    choice the deep tile from the pre-pass pair at M = 1), this session's one-launch twin off
#    / on ("gen_{0,1}": FP8TOWER_EAGER_ONE_LAUNCH); session 40 measured 1.020x bf16's time
#    before session 49's tile.
#    H200: call1.sh's H200 half (the deep tile against the H200's untuned choice at M = 1-8 on
#    20 shapes, its open cells among them; the other open cells with their neighbours).
# 3. The GPU suite with what is left.
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-560}"
GPU=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
O=$OUT/next
mkdir -p "$O"
install_wheels .gpu/run "$O/status.txt"
unpack_prebuilt .gpu/run /tmp/un ~/.cache/fp8tower tests/.cache
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
echo "gpu: $GPU" | tee -a "$O/status.txt"
run() { bench_untuned "$O" "$@"; }  # NAME LIMIT bench_gemm.py args...
B=8576x4096,8960x5120,9472x4096,9984x3584,8704x2048,10112x5120,9472x2560,8832x4608
B=$B,9472x6144,8960x7168,9984x8192,8576x14336
run band 100 --shapes "$B" --m 1,2,4,8 --schemes per_tensor --backends cublaslt,untuned,deep
case "$GPU" in
  *H100*)
    for on in 0 1; do
      FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 FP8TOWER_EAGER_ONE_LAUNCH=$on \
        timeout -k 10 "$(lim 150)" python3 -m fp8tower bench generate --model qwen3-8b --batch 1 \
        --context 512 --steps 16 --rounds 5 --arms bf16,fp8:per_tensor:merged --no-graph \
        --json "$O/gen_$on.json" > "$O/gen_$on.log" 2>&1
      echo "generate one_launch=$on rc=$? left=$(left)" | tee -a "$O/status.txt"
      tail -4 "$O/gen_$on.log"
    done ;;
  *H200*)
    S=5120x2048,5120x4096,4096x2048,4096x4096,4096x14336,5120x8192,10240x5120,2048x4096
    S=$S,6144x4096,8192x8192,9216x7168,28672x4096,34816x5120,1024x5120,1280x8192
    S=$S,37888x3584,22016x4096,14336x4096,18944x2048,12800x5120
    run h200_deep 220 --shapes "$S" --m 1,2,4,8 --schemes per_tensor \
      --backends cublaslt,untuned,deep
    run b128_m64 50 --shapes 12288x5120,14336x5120,10240x5120,12288x4096 --m 32,64 \
      --schemes block128 --backends cublaslt,untuned
    run pt_m8 40 --shapes 10240x5120,10240x4096,9216x5120,11264x5120 --m 8,16 \
      --schemes per_tensor --backends cublaslt,untuned ;;
  *) echo "unknown gpu '$GPU': the band only" | tee -a "$O/status.txt" ;;
esac
gpu_suite_with_left "$O"
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
