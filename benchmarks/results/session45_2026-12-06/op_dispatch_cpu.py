"""Where session 44's op overhead goes, on the CPU (no GPU needed), written to
op_dispatch_cpu.json beside this file. From the repository root:
  .venv/bin/python benchmarks/results/session45_2026-12-06/op_dispatch_cpu.py
Session 44 (op_overhead_cpu.json) found an op call 37-41 us over its launch plan and took
the rest after the registry and plan key (about 35 us) for the custom op's dispatch. Here,
in the same process (us a call, the median of 5 rounds of 3000 calls, inference mode, a
64x64 channel_token weight on the reference backend, M = 1): the op call; the op's Python
body called directly (no dispatcher); its plan alone; and a do-nothing op of the same
schema registered both ways torch offers: torch.library.custom_op (as fp8tower's) and
torch.library.Library.impl."""

import json
import statistics
import time
from pathlib import Path
from typing import Optional

import torch
from torch import Tensor

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


_Y = torch.zeros(1)


@torch.library.custom_op("fp8tower_probe::noop", mutates_args=())
def _noop(x: Tensor, w: Tensor, s: Tensor, a: Optional[Tensor], b: Optional[Tensor],  # noqa: UP045
          c: Optional[Tensor], scheme: str, backend: str, dt: torch.dtype) -> Tensor:  # noqa: UP045
    return _Y.new_empty(1)


_LIB = torch.library.Library("fp8tower_probe2", "DEF")
_LIB.define("noop(Tensor x, Tensor w, Tensor s, Tensor? a, Tensor? b, Tensor? c, str scheme, "
            "str backend, ScalarType dt) -> Tensor")
_LIB.impl("noop", lambda *args: _Y.new_empty(1), "CPU")

torch.manual_seed(0)
mod = Fp8Linear.from_linear(torch.nn.Linear(64, 64, bias=False), "channel_token",
                            backend="reference")
x = torch.randn(1, 64)
args = (x, mod.weight, mod.weight_scale, None, None, None, "channel_token", "reference",
        torch.float32)
with torch.inference_mode():
    mod(x)
    ops.fp8_linear_op(*args)  # builds the op's plan
    w = mod.fp8_weight()
    plan = w.packed[ops._PLANS][ops._plan_key(x, w, None, None, "reference", torch.float32)]
    op = torch.ops.fp8tower.fp8_linear.default
    body = ops.fp8_linear_op._init_fn
    rec = {
        "op_call_us": per_call_us(lambda: op(*args)),
        "op_body_direct_us": per_call_us(lambda: body(*args)),
        "plan_only_us": per_call_us(lambda: plan(x)),
        "noop_custom_op_us": per_call_us(lambda: torch.ops.fp8tower_probe.noop.default(*args)),
        "noop_library_impl_us": per_call_us(
            lambda: torch.ops.fp8tower_probe2.noop.default(*args)),
        "torch_version": torch.__version__,
    }
rec["dispatch_us"] = round(rec["op_call_us"] - rec["op_body_direct_us"], 2)
rec["body_over_plan_us"] = round(rec["op_body_direct_us"] - rec["plan_only_us"], 2)
Path(__file__).with_name("op_dispatch_cpu.json").write_text(json.dumps(rec) + "\n")
print(rec)
