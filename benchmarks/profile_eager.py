"""Where an eager decode step's host time goes, arm by arm (issue #11): the host functions
(cProfile) and the kernels launched per step (torch.profiler), for a transformers model
built as `fp8tower bench generate` builds it (hf/generate.build_arm).

    python benchmarks/profile_eager.py --model qwen3-8b --arms bf16,fp8:per_tensor \
        --json benchmarks/results/profile_eager_qwen3-8b_H200_<date>.json

Per arm: wall ms per eager step (no profiler), the top host functions by own time and by
cumulative time per step under cProfile (which inflates Python-heavy code: compare arms,
not absolute values), and kernel launches per step by kernel name (torch.profiler).
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import json
import pstats
import sys
from pathlib import Path

import torch


def _fn_label(key) -> str:
    file, line, name = key
    short = "/".join(Path(file).parts[-2:]) if file not in ("~", "") else ""
    return f"{short}:{line}({name})" if short else name


def host_profile(live, steps: int, top: int) -> dict:
    from fp8tower.hf import generate as G

    prof = cProfile.Profile()
    prof.enable()
    G.eager_round(live, live.pos.device)
    prof.disable()
    st = pstats.Stats(prof)
    rows = []
    for key, (cc, nc, tt, ct, _) in st.stats.items():
        rows.append({"fn": _fn_label(key), "calls_per_step": nc / steps,
                     "own_us_per_step": tt / steps * 1e6, "cum_us_per_step": ct / steps * 1e6})
    by_own = sorted(rows, key=lambda r: -r["own_us_per_step"])[:top]
    by_cum = sorted(rows, key=lambda r: -r["cum_us_per_step"])[:top]
    total = sum(r["own_us_per_step"] for r in rows)
    return {"profiled_us_per_step": total, "top_own": by_own, "top_cumulative": by_cum}


def kernel_counts(live, steps: int) -> dict:
    from torch.profiler import ProfilerActivity, profile

    from fp8tower.hf import generate as G

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=acts) as prof:
        G.eager_round(live, live.pos.device)
    kernels = collections.Counter()
    launches = collections.Counter()
    for ev in prof.events():
        if ev.device_type.name == "CUDA":
            kernels[ev.name[:90]] += 1
        elif ev.name in ("cudaLaunchKernel", "cuLaunchKernel", "cuLaunchKernelEx",
                         "cudaLaunchKernelExC", "cudaMemcpyAsync", "cudaMemsetAsync"):
            launches[ev.name] += 1
    return {"kernels_per_step": sum(kernels.values()) / steps,
            "launch_calls_per_step": {k: v / steps for k, v in launches.most_common()},
            "by_kernel": {k: v / steps for k, v in kernels.most_common(25)}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="qwen3-8b")
    ap.add_argument("--arms", default="bf16,fp8:per_tensor")
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    from fp8tower import provenance
    from fp8tower.hf import generate as G

    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out = {"benchmark": "profile_eager",
           **provenance.record(["python", "benchmarks/profile_eager.py",
                                *(argv if argv is not None else sys.argv[1:])],
                               gpu_name=torch.cuda.get_device_name() if dev.type == "cuda"
                               else None),
           "model": args.model, "steps": args.steps, "arms": {}}
    for arm in args.arms.split(","):
        # rounds: positions for the 2 timed rounds, the cProfile one and the profiler one
        live = G.build_arm(args.model, arm, batch=1, context=args.context, steps=args.steps,
                           rounds=4, device=dev, backend=args.backend)
        if live.res.skipped:
            out["arms"][arm] = {"skipped": live.res.skipped}
            continue
        for _ in range(2):
            G.eager_round(live, dev)
        rec = {"eager_ms_rounds": [round(v, 3) for v in live.rounds_ms]}
        rec["host"] = host_profile(live, args.steps, args.top)
        rec["kernels"] = kernel_counts(live, args.steps)
        out["arms"][arm] = rec
        t = rec["host"]
        print(f"== {arm}: eager {rec['eager_ms_rounds']} ms/step; cProfile {t['profiled_us_per_step']:.0f}"
              f" us/step; kernels {rec['kernels']['kernels_per_step']:.0f}/step", flush=True)
        for r in t["top_own"][:15]:
            print(f"   {r['own_us_per_step']:9.0f} us {r['calls_per_step']:7.0f}x  {r['fn']}")
        G.finish(live, dev, graph=False)  # frees the model before the next arm
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(out, indent=1))
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
