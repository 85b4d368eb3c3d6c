"""Host cost of the compiled op's layers on the CPU (no GPU needed), written to
op_overhead_cpu.json beside this file. From the repository root:
  .venv/bin/python benchmarks/results/session44_2026-12-06/op_overhead_cpu.py
A tiny channel_token weight (64x64) on the reference backend, inference mode, M = 1: the op
call against its launch plan alone, the registry lookup and the plan key (us a call, the
median of 5 rounds of 3000 calls)."""

import json
import statistics
import time
from pathlib import Path

import torch

from fp8tower.nn import ops
from fp8tower.nn.linear import Fp8Linear


def per_call_us(f, n=3000, rounds=5):
    for _ in range(200):
        f()
    out = []
    for _ in range(rounds):
        t = time.perf_counter()
        for _ in range(n):
            f()
        out.append((time.perf_counter() - t) / n * 1e6)
    return round(statistics.median(out), 2)


torch.manual_seed(0)
lin = torch.nn.Linear(64, 64, bias=False)
mod = Fp8Linear.from_linear(lin, "channel_token", backend="reference")
x = torch.randn(1, 64)
args = (x, mod.weight, mod.weight_scale, None, None, None, "channel_token", "reference",
        torch.float32)
with torch.inference_mode():
    mod(x)
    ops.fp8_linear_op(*args)  # builds the op's plan
    w = mod.fp8_weight()
    key = ops._plan_key(x, w, None, None, "reference", torch.float32)
    plan = w.packed[ops._PLANS][key]
    rec = {
        "op_call_us": per_call_us(lambda: torch.ops.fp8tower.fp8_linear(*args)),
        "plan_only_us": per_call_us(lambda: plan(x)),
        "weight_registry_us": per_call_us(
            lambda: ops.weight_for(mod.weight, mod.weight_scale, None, "channel_token")),
        "plan_key_us": per_call_us(
            lambda: ops._plan_key(x, w, None, None, "reference", torch.float32)),
        "torch_version": torch.__version__,
    }
rec["op_minus_plan_us"] = round(rec["op_call_us"] - rec["plan_only_us"], 2)
Path(__file__).with_name("op_overhead_cpu.json").write_text(json.dumps(rec) + "\n")
print(rec)
