#!/usr/bin/env bash
# Paired traces of the Qwen3.5-27B-shaped transformers model's decode step (random bf16
# weights from the embedded config, converted to FP8 per_tensor by fp8tower.convert, merged
# and unmerged, M=1, one CUDA graph per step), attributed per module group, compared, and
# reported; plus (EAGER=1) 2,6 eager steps of the same merged model (no second build) for the
# host launch statistics (CPU time per launch call, launch delay) of eager decoding.
#
# Usage (H200, repository root):  benchmarks/capture_model_h200.sh OUTDIR
#   env: MODEL (qwen3.5-27b), DECODE_STEPS (4,36: short,long decode steps; 8,136 is the tower's
#   pair, ~4x the trace size), BACKEND (auto), EAGER (1), PYTHON (python3), FP8TOWER_TUNE (0:
#   safe defaults, no tuning inside the capture), MAX_TRACE_MB (40: the traces' tarball is
#   dropped, with a note, when larger).
# Writes OUTDIR/capture_model.tar.gz (reports, manifests, logs; small) and
# OUTDIR/capture_model_traces.tar.gz (the trace pairs), and prints the attribution tables.
# Expected: attribute exits 0 for both arms (kernel families, FP8 GEMM launches per step
# per module group, >= 99% of kernel time in named groups); GDN in_proj GEMMs per step
# 96 (in_proj_qkv + in_proj_z, unmerged) -> 48 (in_proj_qkvz, merged), plus in_proj_b/a
# 96 -> 48 (in_proj_ba).
set -uo pipefail
DEST=${1:?usage: $0 OUTDIR}
mkdir -p "$DEST" && DEST=$(cd "$DEST" && pwd)
cd "$(dirname "$0")/.."
MODEL=${MODEL:-qwen3.5-27b}
DECODE_STEPS=${DECODE_STEPS:-4,36}
BACKEND=${BACKEND:-auto}
EAGER=${EAGER:-1}
PY=${PYTHON:-python3}
MAX_TRACE_MB=${MAX_TRACE_MB:-40}
export FP8TOWER_TUNE=${FP8TOWER_TUNE:-0}
export PYTHONPATH=$PWD/src${PYTHONPATH:+:$PYTHONPATH}
W=$(mktemp -d)/capture_model
mkdir -p "$W" "$DEST"
fp8() { "$PY" -m fp8tower "$@"; }
status=0
run() {  # run a command, log it, remember a failure
  echo "+ $*" | tee -a "$W/commands.log"
  "$@" 2>&1 | tee -a "$W/$LOG"
  local rc=${PIPESTATUS[0]}
  echo "rc=$rc" | tee -a "$W/commands.log"
  [ "$rc" = 0 ] || status=1
}
start=$SECONDS
for arm in merged unmerged; do
  spec=fp8:per_tensor; extra=()
  if [ $arm = merged ]; then
    spec=fp8:per_tensor:merged
    [ "$EAGER" = 1 ] && extra=(--eager-out "$W/merged_eager")
  fi
  LOG=$arm.log run fp8 trace capture-model --model "$MODEL" --arm $spec --backend "$BACKEND" \
      --m 1 --steps "$DECODE_STEPS" --out "$W/$arm" "${extra[@]}"
  echo "capture $arm done at $((SECONDS - start)) s" | tee -a "$W/commands.log"
done
for arm in merged unmerged merged_eager; do
  [ -f "$W/$arm/manifest.json" ] || continue
  LOG=attribute_$arm.log run fp8 trace attribute "$W/$arm" --json "$W/attribute_$arm.json" \
      --csv "$W/attribute_$arm.csv"
done
LOG=compare.log run fp8 trace compare "$W/unmerged" "$W/merged" --json "$W/compare.json" \
    --csv "$W/compare.csv" --html "$W/compare.html"
LOG=report.log run fp8 trace report "$W/unmerged" "$W/merged" --html "$W/report.html" \
    --json "$W/report.json"
# the GDN in_proj GEMM counts per step, from the attribute JSON (independent of the manifest)
"$PY" - "$W" <<'PYEOF' | tee "$W/summary.txt"
import json, re, sys, pathlib
w = pathlib.Path(sys.argv[1])
from fp8tower.hf.capture import GEMM_KERNELS
gemm = re.compile(GEMM_KERNELS)
for arm in ("unmerged", "merged", "merged_eager"):
    p = w / f"attribute_{arm}.json"
    if not p.exists():
        continue
    d = json.loads(p.read_text())
    gdn = sum(n for op in d["ops"] if ".linear_attn.in_proj" in op["label"]
              for k, n in (op.get("kernels") or {}).items() if gemm.search(k))
    named = d["total"]["attributed_ms_per_step"] / d["total"]["ms_per_step"]
    checks = [c for c in d.get("launch_checks", []) if not c["ok"]]
    host = d.get("host") or {}
    print(f"{arm}: {d['total']['ms_per_step']:.3f} ms kernel time/step, "
          f"{d['total']['launches_per_step']:.0f} launches/step, GDN in_proj GEMMs/step {gdn:g}, "
          f"named share {named:.4f}, failed launch checks {len(checks)}, "
          f"host launch CPU {host.get('cpu_ms_per_step')} ms/step")
PYEOF
echo "total $((SECONDS - start)) s" | tee -a "$W/commands.log"
tar czf "$DEST/capture_model.tar.gz" -C "$(dirname "$W")" --exclude='trace_*.json.gz' capture_model
tar czf "$DEST/capture_model_traces.tar.gz" -C "$(dirname "$W")" capture_model
if [ "$(du -m "$DEST/capture_model_traces.tar.gz" | cut -f1)" -gt "$MAX_TRACE_MB" ]; then
  echo "traces tarball over $MAX_TRACE_MB MB: dropped (MAX_TRACE_MB=... to keep it)" \
    | tee "$DEST/traces_dropped.txt"
  rm -f "$DEST/capture_model_traces.tar.gz"
fi
ls -la "$DEST"
exit $status
