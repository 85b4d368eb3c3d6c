"""Which programs of the next GEMM can be resident before the current one ends (no GPU).

PDL lets a GEMM launch while its predecessor runs, but a program of it starts only on an SM
with room beside what runs there. This compiles, for sm_90 on the CPU
(fp8tower.kernels.offline), every Triton choice a tuning cache makes for the merged 27B
tower's GEMMs at one M, and for each boundary of the step (GEMM -> [stand-in] -> GEMM) counts
the next GEMM's programs that fit before the current GEMM's programs leave:

- on the SMs the current grid leaves empty (a grid of g programs takes min(g, 132) SMs, one
  program each before any SM gets a second: the block scheduler fills breadth-first);
- beside the current programs on the busy SMs (shared memory + 1 KB reserved a program,
  registers, warps, 32 blocks: offline.resident_programs' limits).

The activation pre-pass and the stand-ins are small (a few KB, one warp group) and are not
counted: they fit anywhere. It is the hypothesis that call1's timeline (``resident``: a
program's wait minus its begin) checks.

    PATH=<triton 3.6>/backends/nvidia/bin:$PATH PYTHONPATH=src python residency.py \
        benchmarks/results/wo_token_H200_2026-12-04/call6/tuning_cache.json \
        --schemes per_tensor,channel_token --m 1,8 --json residency_sm90.json

``--override`` (bench_override.py's arms) asks the same of other configs, e.g. an out_proj
tile small enough to sit beside the in_proj's: ``--override "num_stages=3@5120x6144"``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from itertools import pairwise
from pathlib import Path

import torch
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/
from bench_override import check_shapes, parse_arm
from restamp_cache import read_cache

from fp8tower.formats import Scheme
from fp8tower.kernels import offline
from fp8tower.kernels.configs import H200_SMS, SMEM_PER_SM, SMEM_RESERVED_PER_PROGRAM
from fp8tower.models.registry import get_spec
from fp8tower.problem import GemmProblem

MODEL = "qwen3.5-27b"


def step_gemms(scheme: Scheme, m: int) -> list[tuple[str, GemmProblem, str]]:
    """(label, problem, input) of the merged tower's GEMMs in step order."""
    out = []
    for g in get_spec(MODEL).gemms(merged=True, fp8_only=True):
        p = GemmProblem(m=m, n=g.n, k=g.k, scheme=scheme, capability=(9, 0),
                        channel_weight_scale=scheme is Scheme.PER_TENSOR and g.merged,
                        static_act_scale=scheme is Scheme.PER_TENSOR)
        out.append((g.name.split(".", 2)[-1], p, g.input.split(".", 2)[-1]))
    return out


def facts(problem: GemmProblem, entry: dict, arm) -> dict:
    if entry["backend"] != "triton":
        return {"backend": entry["backend"], "config": entry["config"]}
    cfg = arm.apply(problem, entry["config"])
    f = offline.compile_gemm(problem, cfg)
    return {"backend": "triton", "config": cfg, "shared_bytes": f.shared_bytes,
            "registers": f.registers, "warps": cfg["num_warps"],
            "programs_per_sm": f.programs_per_sm, "grid": f.grid_programs}


def fits_beside(cur: dict, nxt: dict, cur_here: int) -> int:
    """Programs of ``nxt`` that fit on an SM holding ``cur_here`` programs of ``cur``."""
    def regs(f):
        return offline.program_registers(f["registers"], f["warps"])

    res = SMEM_RESERVED_PER_PROGRAM
    smem = SMEM_PER_SM - cur_here * (cur["shared_bytes"] + res)
    reg = offline.REGS_PER_SM - cur_here * regs(cur)
    warps = offline.MAX_WARPS - cur_here * cur["warps"]
    n = min(smem // (nxt["shared_bytes"] + res), reg // regs(nxt), warps // nxt["warps"],
            offline.MAX_BLOCKS - cur_here)
    return max(0, min(n, nxt["programs_per_sm"]))


def boundary(cur: dict, nxt: dict) -> dict:
    """Next-GEMM programs resident before any program of ``cur`` leaves."""
    g, per_sm = cur["grid"], cur["programs_per_sm"]
    busy = min(g, H200_SMS)
    # breadth-first: every busy SM gets one, then a second ... up to per_sm
    counts = [min(per_sm, g // H200_SMS + (1 if i < g % H200_SMS else 0))
              for i in range(busy)] if g < H200_SMS * per_sm else [per_sm] * H200_SMS
    free_sms = H200_SMS - busy
    early = free_sms * nxt["programs_per_sm"] + sum(fits_beside(cur, nxt, c) for c in counts)
    return {"free_sms": free_sms, "early_programs": min(early, nxt["grid"]),
            "next_grid": nxt["grid"],
            "early_share": round(min(early, nxt["grid"]) / nxt["grid"], 3)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cache", help="a tuning cache (X.json or X.json.gz)")
    ap.add_argument("--schemes", default="per_tensor,channel_token")
    ap.add_argument("--m", default="1,8")
    ap.add_argument("--override", default="cached",
                    help="KEY=VALUE[;KEY=VALUE][@NxK] set on the cached Triton configs first, as "
                         "benchmarks/bench_override.py's arms")
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    os.environ.pop("TRITON_INTERPRET", None)  # interpreted kernels cannot be compiled
    arm = parse_arm(args.override)
    check_shapes({args.override: arm}, MODEL)
    entries = read_cache(args.cache)["entries"]
    rows = []
    for scheme in (Scheme.parse(s) for s in args.schemes.split(",")):
        for m in (int(v) for v in args.m.split(",")):
            gemms = step_gemms(scheme, m)
            by_key = {}
            for _, p, _ in gemms:
                if p.key() not in by_key:
                    if p.key() not in entries:
                        raise SystemExit(f"{args.cache}: no entry {p.key()}")
                    by_key[p.key()] = facts(p, entries[p.key()], arm)
            seen = {}
            for (la, pa, _), (lb, pb, inp) in pairwise(gemms):
                pair = (la, lb)
                if pair in seen:
                    seen[pair]["count"] += 1
                    continue
                a, b = by_key[pa.key()], by_key[pb.key()]
                row = {"scheme": scheme.value, "m": m, "gemm": la, "next": lb,
                       "next_input": inp, "count": 1, "cur": a, "nxt": b}
                if a["backend"] == b["backend"] == "triton":
                    row.update(boundary(a, b))
                seen[pair] = row
                rows.append(row)
    for r in rows:
        print(f"{r['scheme']:>13} M={r['m']:<2} {r['gemm']:>24} -> {r['next']:<24} x{r['count']:<3}"
              f" early {r.get('early_programs', '-')}/{r.get('next_grid', '-')}"
              f" (free SMs {r.get('free_sms', '-')})")
    with open(args.json, "w") as f:
        json.dump({"triton": triton.__version__, "torch": torch.__version__,
                   "cache": args.cache, "override": args.override, "rows": rows}, f,
                  separators=(",", ":"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
