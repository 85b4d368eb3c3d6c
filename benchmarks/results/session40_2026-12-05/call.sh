#!/usr/bin/env bash
# Session 40's device calls (carry [".gpu/run/prebuilt.tar.xz"] and, for the suite, the
# pytest_timeout, pytest_xdist and execnet wheels under .gpu/run/whl); every step packs
# $OUT/$NAME.tgz, so a call cut short keeps what ran.
#   OUT=$OUT NAME=call1 STEPS=heldout,suite bash benchmarks/results/session40_2026-12-05/call.sh
# heldout: the untuned default (this GPU's rule: "untuned") and the H200's rule ("rule")
#          against cuBLASLt, M = 1-64, the three W8A8 schemes, on 26 shapes neither rule was
#          fitted on, chosen (offline, from the rule's own conditions) so that session 39's two
#          H100 deferrals fitted on one shape each meet shapes they were not fitted on:
#          per_tensor's plain tile with K >= 8192 at M = 8 / 16 (Mistral-Large-2 123B whole and
#          TP4, Llama-3.1-405B TP8, Command-R+ 104B's down_proj), block128's split-2 default
#          whose K ends on half a BLOCK_K step at M = 64 (K = 13696, GLM-4-9B's intermediate,
#          under N = 6144 / 8192), beside shapes with K >= 8192 the rule keeps on Triton
#          (Yi-1.5-34B, Gemma-3-27B, GLM-4-9B, 405B TP8's o_proj and down_proj); HELD3=1:
#          another 26 shapes, for the rule as it landed (call3);
# kgrid:   (after call1: the plain-tile deferral gave up 1.2-12% on the 6 held-out shapes it
#          met, all with K >= 12288) per_tensor on the plain default tile, N = 12288 / 14336 / 16384
#          x K = 8192-12288 (the class of that deferral, by the rule's conditions), M = 2-16,
#          KGRID_RUNS runs: where does the Triton tile lose to cuBLASLt?
# wfgrid:  (after call3: per_tensor 9216x8192 at M = 8 0.978x on the landed rule) per_tensor's
#          split wave-fit default that moved to 3 stages and split 2 because its unsplit tiles
#          (133-173 of BLOCK_N 64) overfill the 132 SMs, at M = 2-16, on 14 shapes of that
#          class it has not met (Llama-2-7B's 11008x4096, Qwen3-4B's 9728x2560, ...) and 2 it
#          has, WF_RUNS runs: does it lose at M = 8 (where the rule keeps it) as at M = 16?
# generate: end-to-end decode of the Qwen3-8B-shaped transformers model (random weights,
#          batch 1 and 8, context 512): bf16, fp8tower per scheme (tuned from cold in the
#          run, this GPU's rule before), torchao float8 and transformers' block-FP8 linear,
#          eager and under a CUDA graph (needs the torchao wheel in .gpu/run/whl);
# suite:   the whole GPU test suite (pytest -m gpu), SUITE_N workers (10: 14 ran 3 tests out of
#          memory on an 80 GB card in session 39).
set -uo pipefail
T0=$(date +%s)
BUDGET=${BUDGET:-560}
STEPS=${STEPS:-heldout,suite}
NAME=${NAME:-call}
left() { echo $(( BUDGET - ($(date +%s) - T0) )); }
has() { [[ ",$STEPS," == *",$1,"* ]]; }
# a step's time limit: at most $1, at least 1 s (timeout 0 would mean none)
lim() { local l=$(( $(left) - 5 )); [ "$l" -lt 1 ] && l=1; [ "$l" -lt "$1" ] && echo "$l" || echo "$1"; }
FINAL=${OUT:-out}
O=$FINAL/$NAME
mkdir -p "$O" .gpu/run/cache
pack() { tar czf "$FINAL/$NAME.tgz" -C "$FINAL" "$NAME"; }
tar xJf .gpu/run/prebuilt.tar.xz -C .gpu/run/cache || echo "prebuilt.tar.xz missing" >> "$O/status.txt"
. benchmarks/device_wheels.sh
install_wheels .gpu/run "$O/status.txt"
export PYTHONPATH=$PWD/src:/tmp/site PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,clocks.mem,clocks.max.sm --format=csv > "$O/gpu.txt" 2>&1
echo "steps=$STEPS" >> "$O/status.txt"
fresh() { rm -rf "$1" && mkdir -p "$1" && cp -r .gpu/run/cache/. "$1"/; }
if has heldout; then
  HELD=14336x12288,12288x12288,12288x28672,3584x12288,12288x3072,12288x7168,12288x33792
  HELD=$HELD,2304x16384,16384x2048,13312x16384,16384x6656,16384x16384
  HELD=$HELD,9216x7168,7168x7168,40960x7168,7168x20480,8192x5376,43008x5376,5376x21504
  HELD=$HELD,4608x4096,27392x4096,4096x13696,8192x13696,6144x13696,8192x13824,6144x13824
  # HELD3 (call3, after call1-2 dropped the plain-tile deferral): the rule as landed, on 26
  # shapes neither rule had met (Mixtral-8x22B, DBRX, Falcon-40B, Command-R 35B,
  # Llama-3.1-405B TP4, Mistral-Small-3 24B, Gemma-3-12B, StarCoder2-15B)
  [ -n "${HELD3:-}" ] && HELD=8192x6144,6144x6144,32768x6144,6144x16384,21504x6144,6144x10752,9216x8192,32768x8192,8192x32768,45056x8192,8192x22528,24576x8192,4608x16384,16384x4096,26624x16384,16384x13312,5120x4096,65536x5120,5120x32768,8192x3840,3840x4096,30720x3840,3840x15360,7168x6144,24576x6144,6144x24576
  fresh /tmp/un
  s0=$(date +%s)
  FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "$(lim ${HELD_S:-240})" \
    python3 benchmarks/bench_gemm.py --shapes "$HELD" --m 1,2,4,8,16,32,64 \
    --schemes per_tensor,channel_token,block128 --backends cublaslt,untuned,rule \
    --precompile --replays 10 --json "$O/heldout.json" > "$O/heldout.log" 2>&1
  echo "heldout rc=$? s=$(( $(date +%s) - s0 ))" | tee -a "$O/status.txt"
  grep -A60 "slower than" "$O/heldout.log" | head -60 >> "$O/status.txt"
  pack
fi
if has kgrid; then
  KG=$(python3 -c "print(','.join(f'{n}x{k}' for n in (12288, 14336, 16384) for k in range(8192, 12289, 1024)))")
  fresh /tmp/un
  for r in $(seq 1 ${KGRID_RUNS:-2}); do
    s0=$(date +%s)
    FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "$(lim 150)" \
      python3 benchmarks/bench_gemm.py --shapes "$KG" --m 2,4,8,16 --schemes per_tensor \
      --backends cublaslt,untuned,rule --replays 10 --json "$O/kgrid_$r.json" > "$O/kgrid_$r.log" 2>&1
    echo "kgrid $r rc=$? s=$(( $(date +%s) - s0 ))" | tee -a "$O/status.txt"
    grep -A40 "slower than" "$O/kgrid_$r.log" | head -40 >> "$O/status.txt"
    pack
  done
fi
if has wfgrid; then
  WF=11008x4096,9728x2560,8960x1536,10752x6144,8704x8192,9472x5120,10496x4096,8960x3584
  WF=$WF,11008x5120,9216x4096,8704x3072,10240x3072,9216x2048,8960x12288,9216x8192,10240x5120
  fresh /tmp/un
  for r in $(seq 1 ${WF_RUNS:-2}); do
    s0=$(date +%s)
    FP8TOWER_CACHE_DIR=/tmp/un FP8TOWER_TUNE=0 timeout "$(lim 150)" \
      python3 benchmarks/bench_gemm.py --shapes "$WF" --m 2,4,8,16 --schemes per_tensor \
      --backends cublaslt,untuned,rule --replays 10 --json "$O/wfgrid_$r.json" > "$O/wfgrid_$r.log" 2>&1
    echo "wfgrid $r rc=$? s=$(( $(date +%s) - s0 ))" | tee -a "$O/status.txt"
    grep -A40 "slower than" "$O/wfgrid_$r.log" | head -40 >> "$O/status.txt"
    pack
  done
fi
if has generate; then
  fresh /tmp/gen
  s0=$(date +%s)
  FP8TOWER_CACHE_DIR=/tmp/gen timeout "$(lim 480)" python3 -m fp8tower bench generate \
    --model qwen3-8b --batch ${GEN_BATCH:-1,8} --context 512 --steps 16 --rounds 5 \
    ${GEN_ARGS:-} --json "$O/generate.json" > "$O/generate.log" 2>&1
  echo "generate rc=$? s=$(( $(date +%s) - s0 ))" | tee -a "$O/status.txt"
  pack
fi
if has suite; then
  fresh /tmp/gt
  s0=$(date +%s)
  FP8TOWER_CACHE_DIR=/tmp/gt timeout "$(lim 400)" python3 -m pytest -q -m gpu -p no:cacheprovider \
    -n ${SUITE_N:-10} --timeout 150 -rfE --durations=15 tests --ignore tests/test_nonfinite.py \
    > "$O/pytest.log" 2>&1
  echo "suite rc=$? s=$(( $(date +%s) - s0 ))" | tee -a "$O/status.txt"
  tail -4 "$O/pytest.log" >> "$O/status.txt"
  pack
fi
pack
echo "total t=$(( $(date +%s) - T0 ))"
cat "$O/status.txt"
