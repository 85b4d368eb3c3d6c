#!/usr/bin/env bash
# Session 66 (carry .gpu/run; an H200 wanted): what a CUDA graph runs for a tie its eager
# calls take otherwise. Session 62's H200 per_tensor tuning from cold ("iso", its meta set to
# this machine's; FP8TOWER_TUNE=0) holds one: the M = 32 out_proj / o_proj key, Triton for
# eager calls, CUTLASS (1.1% faster in the tuner's chain) for graphs. The 27B merged tower at
# MS (default 32), alternated new, old, host, host, old, new; 2 rounds each:
#   new:  this code, the capture runs the plan of the graph's choice (Plan.graph);
#   old:  session 65's, the capture runs that choice unplanned (Plan.graph dropped: CUTLASS's
#         pre-pass then launches without PDL);
#   host: FP8TOWER_HOST_TIE=1, graphs take the eager tie too (Triton, planned).
# Outputs: DIR (default tie)/status.txt, tower_*.json, logs.tgz.
#   BUDGET=200 OUT=$OUT bash benchmarks/results/session66_2026-12-07/tie_ab.sh
set -uo pipefail
. benchmarks/device_wheels.sh
budget_start "${BUDGET:-200}"
O=$OUT/${DIR:-tie}
device_setup .gpu/run "$O"
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" | tee -a "$O/status.txt"
cold_cache .gpu/run /tmp/tie
python3 - <<'PY'
import gzip, json
import torch
from fp8tower.tuning.cache import cache_file_name, environment_meta
src = "benchmarks/results/session62_2026-12-07/ctx/tuning_cache_per_tensor_iso.json.gz"
d = json.load(gzip.open(src))
d["meta"] = environment_meta(torch.cuda.get_device_name())
open("/tmp/tie/" + cache_file_name(d["meta"]["gpu"]), "w").write(json.dumps(d))
PY
OLD="import fp8tower.nn.plan as P
_build = P.build
def build(*a, **k):
    p = _build(*a, **k)
    p.graph = None
    return p
P.build = build"
tower() {  # tag code [FP8TOWER_HOST_TIE]
  FP8TOWER_TUNE=0 FP8TOWER_HOST_TIE=${3:-} FP8TOWER_CACHE_DIR=/tmp/tie \
    timeout -k 10 "$(lim 70)" python3 -c "$2
from fp8tower.cli import main; main()" bench tower --model qwen3.5-27b --arms merged \
    --backends auto --scheme per_tensor --m "${MS:-32}" --rounds 2 \
    --json "$O/tower_$1.json" > "$O/tower_$1.log" 2>&1
  echo "$1 rc=$? left=$(left)" | tee -a "$O/status.txt"
  grep -E "│ per_tensor" "$O/tower_$1.log" | head -3
}
tower new pass; tower old "$OLD"; tower host pass 1
tower host2 pass 1; tower old2 "$OLD"; tower new2 pass
(cd "$O" && tar czf logs.tgz ./*.log && rm -f ./*.log)
