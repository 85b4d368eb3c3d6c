"""Host time of one eager linear call at decode size (issue #11): nn.Linear bf16, torch's own
quant + _scaled_mm, and Fp8Linear per scheme, with and without cached launch plans.

Two measures per arm, microseconds per call:
- ``b2b_us``: back-to-back calls, one synchronize at the end (what an eager decode loop
  sees: host-bound when the host cost per call exceeds the GPU's);
- ``idle_us``: one call timed by time.perf_counter with the GPU idle (synchronized before),
  median over calls: the host cost alone.
Ratios are to nn.Linear bf16 measured in the same run. The arms are timed in ``--rounds``
interleaved rounds (every arm once per round, in turn) and each measure is the median over
rounds: the host drifts between slow and fast phases lasting seconds (2026-12-01: the same
planned call took 16 us in one arm-after-arm run and 27 us in the next,
results/host_one_launch_H200_2026-12-01/), which must not fall on one arm alone.
``b2b_paired_ratio`` is the median over rounds of the arm's / nn.Linear's time of that round.

    python benchmarks/bench_host.py                       # 4096x4096 and 17408x5120, M=1
    python benchmarks/bench_host.py --shapes 4096x4096 --m 1,8 --json out.json
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))

SCHEMES = ("per_tensor", "channel_token", "block128", "weight_only")


def _arms(n: int, k: int, backend: str):
    """(name, callable(x)) pairs; Fp8Linear ones planned and unplanned."""
    from fp8tower.formats import FP8_DTYPE, Scheme
    from fp8tower.nn.linear import Fp8Linear

    lin = nn.Linear(k, n, bias=False, device="cuda", dtype=torch.bfloat16)
    arms = [("nn.Linear bf16", lin)]
    wq = lin.weight.detach().float()
    ws = (wq.abs().amax() / 448.0).reshape(())
    wt = (wq / ws).clamp(-448, 448).to(FP8_DTYPE).t()
    xs = torch.tensor(0.02, device="cuda")

    def scaled_mm(x, wt=wt, ws=ws, xs=xs):
        xq = (x / xs).clamp(-448, 448).to(FP8_DTYPE)
        return torch._scaled_mm(xq, wt, scale_a=xs, scale_b=ws, out_dtype=torch.bfloat16)

    arms.append(("torch quant + _scaled_mm", scaled_mm))
    for scheme in SCHEMES:
        for planned in (True, False):
            mod = Fp8Linear.from_linear(lin, scheme,
                                        act_scale=0.02 if scheme == Scheme.PER_TENSOR.value else None,
                                        backend=backend)
            mod.use_plans = planned
            label = "per_tensor static" if scheme == "per_tensor" else scheme
            arms.append((f"Fp8Linear {label} {'planned' if planned else 'unplanned'}", mod))
    return arms


def measure(fn, x, calls: int, idle_calls: int) -> dict:
    """One round of one arm: back-to-back seconds per call (with and without the final
    synchronize) and the idle-GPU seconds of each of ``idle_calls`` single calls."""
    with torch.inference_mode():
        for _ in range(20):
            fn(x)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(calls):
            fn(x)
        t_host = time.perf_counter() - t0
        torch.cuda.synchronize()
        t_all = time.perf_counter() - t0
        idle = []
        for _ in range(idle_calls):
            torch.cuda.synchronize()
            t = time.perf_counter()
            fn(x)
            idle.append(time.perf_counter() - t)
        torch.cuda.synchronize()
    return {"b2b": t_all / calls, "host": t_host / calls, "idle": idle}


def summarize(rounds: list[dict], base_rounds: list[dict] | None) -> dict:
    """Medians over rounds (us) and the ratios to the base arm (nn.Linear)."""
    med = statistics.median
    idle = sorted(v for r in rounds for v in r["idle"])
    out = {"b2b_us": round(med(r["b2b"] for r in rounds) * 1e6, 2),
           "b2b_host_only_us": round(med(r["host"] for r in rounds) * 1e6, 2),
           "idle_us": round(med(idle) * 1e6, 2),
           "idle_p10_us": round(idle[len(idle) // 10] * 1e6, 2),
           "b2b_rounds_us": [round(r["b2b"] * 1e6, 2) for r in rounds]}
    if base_rounds:
        base_b2b = med(r["b2b"] for r in base_rounds)
        base_idle = med(v for r in base_rounds for v in r["idle"])
        out["b2b_ratio"] = round(med(r["b2b"] for r in rounds) / base_b2b, 2)
        out["idle_ratio"] = round(med(idle) / base_idle, 2)
        out["b2b_paired_ratio"] = round(med(r["b2b"] / b["b2b"]
                                            for r, b in zip(rounds, base_rounds)), 2)
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="4096x4096,17408x5120", help="NxK list")
    ap.add_argument("--m", default="1", help="token counts, comma list")
    ap.add_argument("--backend", default="triton", help="Fp8Linear backend (auto tunes first)")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--idle-calls", type=int, default=300)
    ap.add_argument("--rounds", type=int, default=5,
                    help="interleaved rounds (calls and idle calls are split over them)")
    ap.add_argument("--json", default=None, help="output (default benchmarks/results/host_<gpu>_<date>.json)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("bench_host.py needs a CUDA GPU")

    from fp8tower import provenance

    rows = []
    for shape in args.shapes.split(","):
        n, k = (int(v) for v in shape.lower().split("x"))
        arms = _arms(n, k, args.backend)
        for m in (int(v) for v in args.m.split(",")):
            x = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            timed: dict[str, list] = {name: [] for name, _ in arms}
            errors: dict[str, str] = {}
            for _ in range(args.rounds):
                for name, fn in arms:
                    if name in errors:
                        continue
                    try:
                        timed[name].append(measure(fn, x, max(1, args.calls // args.rounds),
                                                   max(1, args.idle_calls // args.rounds)))
                    except (ValueError, RuntimeError, NotImplementedError) as e:
                        # a backend that does not serve this scheme: recorded, not fatal
                        errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
            base = timed[arms[0][0]] or None
            for name, fn in arms:
                if name in errors:
                    rows.append({"arm": name, "n": n, "k": k, "m": m, "error": errors[name]})
                    print(f"{n}x{k} M={m} {name:42s} {errors[name]}", flush=True)
                    continue
                r = {"arm": name, "n": n, "k": k, "m": m, **summarize(timed[name], base)}
                plan = next(iter(getattr(fn, "_plans", {}).values()), None)
                if plan is not None:
                    r["plan_backend"] = plan.plan.backend.name
                    r["direct_launches"] = plan.plan.direct_launches
                    r["launches_per_call"] = len(plan.plan.launches)
                rows.append(r)
                print(f"{n}x{k} M={m} {name:42s} b2b {r['b2b_us']:7.1f} us ({r['b2b_ratio']:.2f}x, "
                      f"paired {r['b2b_paired_ratio']:.2f}x)  idle {r['idle_us']:7.1f} us "
                      f"({r['idle_ratio']:.2f}x)", flush=True)
    gpu = torch.cuda.get_device_name()
    result = {
        "benchmark": "bench_host",
        **provenance.record(["python", "benchmarks/bench_host.py",
                             *(argv if argv is not None else sys.argv[1:])], gpu_name=gpu),
        "capability": list(torch.cuda.get_device_capability()), "cpu": platform.processor(),
        "backend": args.backend,
        "rounds": args.rounds,
        "units": {"b2b_us": "microseconds of wall time per call, back to back, one sync at the "
                            "end; median over the interleaved rounds",
                  "idle_us": "microseconds of host time of one call with the GPU idle (median "
                             "over every round's calls)",
                  "ratio": "to nn.Linear bf16 of the same shape and M, same run; "
                           "b2b_paired_ratio: median over rounds of the per-round ratio"},
        "rows": rows,
    }
    path = Path(args.json) if args.json else provenance.result_path(
        "benchmarks/results", f"host_{gpu.replace(' ', '-')}", result["date"])
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
