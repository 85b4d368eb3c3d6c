"""Static sm_90 facts of every Triton config in a tuning cache, next to its measured time.

Runs on any machine (no GPU): each timed Triton candidate of the cache file is compiled for
sm_90 (fp8tower.kernels.offline), giving its shared memory, registers, programs resident per
SM and the grid's waves on 132 SMs; the row keeps the candidate's measured median and % of
the read ceiling from the cache. The question it answers: which static property goes with
the slow configs (H200 2026-11-29: grids just over one wave).

    python benchmarks/static_sm90.py benchmarks/results/tuning_cache_all_H200_2026-11-29.json \
        --out benchmarks/results/static_sm90_vs_tuning_H200_2026-11-29.json

Note: the facts come from the triton installed here, which may differ from the one that was
timed (the JSON records both versions).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
from datetime import date

os.environ.pop("TRITON_INTERPRET", None)  # interpreted kernels cannot be compiled
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")

import triton

from fp8tower.kernels import offline
from fp8tower.tuning import cache as tcache


def rows_for(path: str) -> tuple[dict, list[dict]]:
    with open(path) as f:
        raw = json.load(f)
    rows = []
    entries = list(raw["entries"].items())
    for i, (key, e) in enumerate(entries):
        p, ceiling = e["problem"], e.get("read_ceiling_gbps")
        problem = tcache.problem_from_json(p)
        for c in e["candidates"]:
            if c["backend"] != "triton" or c["error"]:
                continue
            f = offline.compile_gemm(problem, c["config"])
            rows.append({
                "key": key, "scheme": p["scheme"], "m": p["m"], "n": p["n"], "k": p["k"],
                "config": c["config"], "winner": c["config"] == e["config"],
                "median_us": c["median_us"],
                "ceiling_fraction": c["gbps"] / ceiling if ceiling else None,
                "shared_bytes": f.shared_bytes, "registers": f.registers,
                "spill_bytes": f.spill_bytes, "programs_per_sm": f.programs_per_sm,
                "grid_programs": f.grid_programs, "waves": f.waves,
            })
        print(f"\r{i + 1}/{len(entries)} entries", end="", file=sys.stderr)
    print(file=sys.stderr)
    return raw["meta"], rows


def summarize(rows: list[dict]) -> list[dict]:
    """The untuned default tile (BLOCK_N 64, BLOCK_K 256, 4 stages, fused quant) of
    per_tensor at M <= 16, per shape: its waves and median % of the ceiling over the M."""
    out = []
    shapes = sorted({(r["n"], r["k"]) for r in rows})
    for n, k in shapes:
        rs = [r for r in rows if (r["n"], r["k"]) == (n, k) and r["scheme"] == "per_tensor"
              and r["m"] <= 16 and r["ceiling_fraction"] is not None
              and (r["config"]["block_n"], r["config"]["block_k"], r["config"]["num_stages"],
                   r["config"].get("prequant")) == (64, 256, 4, False)]
        if rs:
            out.append({"shape": f"{n}x{k}", "weight_mb": n * k / 1e6,
                        "split_k": rs[0]["config"]["split_k"], "waves": rs[0]["waves"],
                        "median_ceiling_fraction": statistics.median(
                            r["ceiling_fraction"] for r in rs)})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cache", help="a tuning cache file (fp8tower tune)")
    ap.add_argument("--out", help="write the rows as JSON here")
    args = ap.parse_args()
    meta, rows = rows_for(args.cache)
    summary = summarize(rows)
    for r in sorted(rows, key=lambda r: (r["scheme"], r["n"], r["k"], r["m"], r["median_us"])):
        if r["m"] != 1:
            continue
        c = r["config"]
        print(f"{r['scheme']:<13} {r['n']:>5}x{r['k']:<5} bn{c['block_n']:<3} bk{c['block_k']:<3} "
              f"split{c['split_k']:<2} st{c['num_stages']} {'pre' if c.get('prequant') else 'fus'}"
              f" smem {r['shared_bytes'] // 1024:>3} KB regs {r['registers']} "
              f"{r['programs_per_sm']}/SM grid {r['grid_programs']:>4} waves {r['waves']:.2f}"
              f" -> {100 * r['ceiling_fraction']:.0f}% ({r['median_us']:.1f} us)"
              + (" *" if r["winner"] else ""))
    print("default tile, per_tensor, M <= 16:")
    for r in sorted(summary, key=lambda r: r["waves"]):
        print(f"  {r['shape']:>11} {r['weight_mb']:5.1f} MB split {r['split_k']} "
              f"waves {r['waves']:.2f} -> {100 * r['median_ceiling_fraction']:.0f}%")
    if args.out:
        doc = {
            "what": "static sm_90 facts (compiled here, no GPU) joined with measured times",
            "date": date.today().isoformat(), "command": " ".join(sys.argv),
            "measured_on": meta, "compiled_with": {"triton": triton.__version__,
                                                   "machine": platform.machine()},
            "default_tile_per_tensor_m_le_16": summary, "rows": rows,
        }
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
