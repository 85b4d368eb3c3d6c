"""A GEMM's time split into a fixed cost and a body, from a bench_gemm.py JSON (no GPU).

For each arm (scheme, M and bench_gemm's arm name: ``auto`` with whatever config it chose
per shape, or one fixed Triton config as ``triton[key=value,...]``) over shapes that share
one dimension and vary the other (``--vary k``: N fixed, K growing; ``--vary n``: the
reverse), a least-squares line us = bytes / body_bandwidth + fixed. The body's bandwidth
against the run's read ceiling says whether the stream itself falls short; the intercept is
what a GEMM pays whatever its size (launch, ramp, tail, the boundary with its neighbours).
A residual much larger than the timing noise means the line does not hold (waves: the grid
fills the GPU differently at each size).

    python benchmarks/bench_gemm.py --schemes per_tensor --m 1,8 \\
        --shapes 5120x3072,5120x6144,5120x12288,5120x24576 --backends cublaslt,auto --json F
    python benchmarks/fit_fixed_cost.py F --vary k
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

MIN_POINTS = 3


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float, float]:
    """(slope, intercept, worst |residual|) of the least-squares line through the points."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    if sxx == 0:
        raise ValueError(f"every point has the same size ({xs[0]} MB): nothing to fit")
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    icpt = my - slope * mx
    return slope, icpt, max(abs(y - (slope * x + icpt)) for x, y in zip(xs, ys))


def fits(result: dict, vary: str) -> list[dict]:
    """One fit per arm and fixed dimension with >= MIN_POINTS sizes, from bench_gemm rows."""
    fixed_dim = "n" if vary == "k" else "k"
    groups = defaultdict(list)
    for r in result["rows"]:
        if "us" in r:
            groups[(r["scheme"], r["m"], r["backend"], r[fixed_dim])].append(r)
    ceiling = result["read_ceiling_gbs"]
    out = []
    for (scheme, m, arm, fixed), rows in sorted(groups.items()):
        if len({r[vary] for r in rows}) < MIN_POINTS:
            continue
        mb = [r["bytes"] / 1e6 for r in rows]
        slope, icpt, resid = fit_line(mb, [r["us"] for r in rows])
        gbs = 1e3 / slope if slope > 0 else None  # no growth with the bytes: no body rate
        out.append({"scheme": scheme, "m": m, "arm": arm, fixed_dim: fixed,
                    vary: sorted(r[vary] for r in rows),
                    "body_gbs": round(gbs) if gbs else None,
                    "body_pct_ceiling": round(100 * gbs / ceiling, 1) if gbs else None,
                    "fixed_us": round(icpt, 2), "worst_residual_us": round(resid, 2)})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", help="a results JSON of benchmarks/bench_gemm.py")
    ap.add_argument("--vary", choices=("k", "n"), default="k",
                    help="the dimension that grows across the fitted shapes (default k)")
    args = ap.parse_args(argv)
    try:
        result = json.loads(Path(args.json).read_text())
        rows = fits(result, args.vary)
    except (OSError, json.JSONDecodeError) as e:
        raise SystemExit(f"{args.json}: cannot read it as JSON: {e}") from None
    except (KeyError, TypeError) as e:
        raise SystemExit(f"{args.json}: not a benchmarks/bench_gemm.py result (rows with "
                         f"scheme, n, k, m, backend, bytes, us and read_ceiling_gbs): "
                         f"missing {e}") from None
    if not rows:
        raise SystemExit(f"{args.json}: no arm has {MIN_POINTS} or more sizes of "
                         f"{args.vary.upper()} at one {'N' if args.vary == 'k' else 'K'}")
    print(f"read ceiling {result['read_ceiling_gbs']:.0f} GB/s; us = MB / body + fixed")
    for f in rows:
        body = (f"body {f['body_gbs']} GB/s ({f['body_pct_ceiling']}%)" if f["body_gbs"]
                else "no growth with the bytes")
        print(f"{f['scheme']} M={f['m']} {f['arm']}: {body}, fixed {f['fixed_us']} us, "
              f"worst residual {f['worst_residual_us']} us")


if __name__ == "__main__":
    main()
