"""The 27B tower's stand-ins on torch.add or on one stride-aware kernel: how much of the M = 8
/ 32 ratio to M = 1 is the stand-ins' (issue #12).

The tower's stand-in (``a + b`` of two column slices of the GEMM outputs, tower/build.py)
runs torch.add: its vectorized kernel at M = 1 (contiguous slices), its strided one above
(paired traces, H200 2026-12-02, results/m32_gap_H200_2026-12-02/: 1.2 us a call at M = 1,
2.6-2.8 at M = 8 and 32). Arm ``rows`` runs the same add as tower/standin.rows_add, one
Triton kernel that reads each row at its stride with 16-byte loads (launched without PDL, as
a foreign kernel is): the same bits; what it costs at each M is what this measures. Every
other kernel is the same in both arms. First run: results/standin_H200_2026-12-04/call1/
(`fp8tower bench tower --standin torch|rows` times one arm per run).

The merged tower (tuning cache in FP8TOWER_CACHE_DIR), each arm alternated
(benchmarks/tower_ab.py); each arm's M ratios to its own M = 1 are printed at the end.

    python benchmarks/bench_standin.py --m 1,8,32 --rounds 2 --json out.json
"""

from __future__ import annotations

import argparse
import sys
import time

import torch

from fp8tower.formats import Scheme
from fp8tower.tower import build

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from tower_ab import add_arguments, parse_ms, parse_schemes, run_arms, write_rows


def m_ratios(rows: list[dict]) -> dict[str, dict[str, dict[int, float]]]:
    """{scheme: {arm: {M: ms at M / ms at the scheme's smallest M}}} from run_arms' rows."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for scheme in dict.fromkeys(r["scheme"] for r in rows):
        mine = sorted((r for r in rows if r["scheme"] == scheme), key=lambda r: r["m"])
        for arm in mine[0]["arms"]:
            base = mine[0]["arms"][arm]["ms"]
            out.setdefault(scheme, {})[arm] = {r["m"]: round(r["arms"][arm]["ms"] / base, 4)
                                               for r in mine}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_arguments(ap)
    ap.add_argument("--schemes", default="per_tensor,channel_token,block128")
    ap.add_argument("--arms", default="torch,rows",
                    help=f"comma list of {', '.join(build.STANDIN_KERNELS)}; the first is the "
                         "baseline of the ratios")
    args = ap.parse_args(argv)
    arms = args.arms.split(",")
    for a in arms:
        if a not in build.STANDIN_KERNELS:
            raise SystemExit(f"--arms: {a!r} is not one of {', '.join(build.STANDIN_KERNELS)}")
    schemes = parse_schemes(args.schemes)
    if "rows_fp8" in arms and any(Scheme.parse(s) is not Scheme.PER_TENSOR for s in schemes):
        # cli._common.check_standin's rule: refused here, not mid-run at the first other scheme
        raise SystemExit(f"--arms rows_fp8 quantizes with per_tensor's static activation scale; "
                         f"--schemes {args.schemes}: pass --schemes per_tensor (rows serves "
                         "every scheme)")
    ms = parse_ms(args.m)
    if not torch.cuda.is_available():
        raise SystemExit("bench_standin.py needs a CUDA GPU")
    t0 = time.time()

    def set_arm(a: str) -> None:
        build.STANDIN_KERNEL = a

    try:
        rows = run_arms(args.model, schemes, ms, arms, set_arm, args.rounds, args.steps,
                        args.replays, json_path=args.json, t0=t0)
    finally:
        build.STANDIN_KERNEL = "torch"
    write_rows(args.json, rows, t0)
    for scheme, per_arm in m_ratios(rows).items():
        for arm, ratios in per_arm.items():
            print(scheme, arm, "ratio to the smallest M:", ratios)
    return 0


if __name__ == "__main__":
    sys.exit(main())
