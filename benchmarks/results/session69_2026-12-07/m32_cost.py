"""Offline (no GPU): is the per_tensor GEMM's extra time at M = 32 over M = 1 x's L2 traffic?

Every program of the Triton GEMM reads all of x (M x K bytes at FP8) from L2, so x's traffic
is (N / BLOCK_N) x M x K: 1.3 MB at M = 1 on 16384x5120 and 41.9 MB at M = 32, against the
weights' 83.9 MB. If that traffic cost time, (a) the M = 32 - M = 1 delta of one config
would grow with it across shapes, and (b) BLOCK_N 128 (half the traffic) would beat BLOCK_N
64 at M = 32. Two H200 sources, both tuned from cold:
- session 62's per-GEMM scorecard (sc/scorecard.json, the tuner's chain): shapes whose tuned
  Triton config is the same at M = 1 and 32, so the delta is M's alone;
- session 65's tuning caches (ab/tuning_cache_*.json.gz): the M = 32 candidates' times in the
  tuner's chain, the best BLOCK_N 64 and the best BLOCK_N 128 of each key.
And this session's H100 run (slope/slope2.json: bench_gemm.py, the tuner's chain, one config,
BLOCK_K 256, 4 stages, pre-pass, tile-major, at BLOCK_N 64 and 128, M = 1, 8, 16, 32): each
arm's M = 32 - M = 1 delta and x's extra traffic, and 128 over 64 at each M.

    .venv/bin/python benchmarks/results/session69_2026-12-07/m32_cost.py   # -> m32_cost.json
"""

import gzip
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent
SCORECARD = RESULTS / "session62_2026-12-07/sc/scorecard.json"
CACHES = RESULTS / "session65_2026-12-07/ab"
SAME = ("block_n", "block_k", "split_k", "num_stages", "prequant", "packed")


def x_traffic_mb(n: int, k: int, m: int, cfg: dict) -> float:
    """x's bytes read from L2 by the grid: every (N tile, K split) program reads its K range
    of x's M rows; summed over the splits that is (N / BLOCK_N) x M x K."""
    return -(-n // cfg["block_n"]) * m * k / 1e6


def scorecard_deltas() -> list[dict]:
    rows = json.loads(SCORECARD.read_text())["rows"]
    auto = {(r["n"], r["k"], r["m"]): r for r in rows
            if r["scheme"] == "per_tensor" and r["backend"] == "auto" and r.get("us")}
    out = []
    for (n, k, m), r32 in sorted(auto.items()):
        r1 = auto.get((n, k, 1))
        if m != 32 or r1 is None or not (r1.get("config") and r32.get("config")):
            continue
        c1, c32 = r1["config"], r32["config"]
        if any(c1.get(key) != c32.get(key) for key in SAME):
            continue  # another config at M = 32: its delta is not M's alone
        out.append({"shape": f"{n}x{k}", "config": {key: c32.get(key) for key in SAME},
                    "us_m1": r1["us"], "us_m32": r32["us"],
                    "delta_us": round(r32["us"] - r1["us"], 2),
                    "x_extra_mb": round(x_traffic_mb(n, k, 32, c32)
                                        - x_traffic_mb(n, k, 1, c32), 1)})
    return out


def block_n_at_m32() -> list[dict]:
    out = []
    for path in sorted(CACHES.glob("tuning_cache_*.json.gz")):
        for key, e in json.loads(gzip.decompress(path.read_bytes()))["entries"].items():
            if not key.startswith("m32_"):
                continue
            best = {}
            for c in e["candidates"]:
                cfg = c.get("config") or {}
                if c["backend"] != "triton" or c.get("median_us") is None:
                    continue
                bn = cfg.get("block_n")
                if bn not in best or c["median_us"] < best[bn]:
                    best[bn] = c["median_us"]
            if 64 in best and 128 in best:
                out.append({"key": key.split("_bfloat16")[0],
                            "best_us_block_n64": round(best[64], 2),
                            "best_us_block_n128": round(best[128], 2),
                            "ratio_128_over_64": round(best[128] / best[64], 3)})
    return out


def h100_slope() -> list[dict]:
    rows = json.loads((HERE / "slope/slope2.json").read_text())["rows"]
    us = {(r["n"], r["k"], r["m"], r["backend"].split(",")[0]): r["us"] for r in rows}
    out = []
    for n, k in sorted({(n, k) for n, k, _, _ in us}, reverse=True):
        row = {"shape": f"{n}x{k}"}
        for bn in (64, 128):
            arm = f"triton[block_n={bn}"
            row[f"delta_us_block_n{bn}"] = round(us[n, k, 32, arm] - us[n, k, 1, arm], 2)
            row[f"x_extra_mb_block_n{bn}"] = round(
                x_traffic_mb(n, k, 32, {"block_n": bn}) - x_traffic_mb(n, k, 1, {"block_n": bn}), 1)
        # delta = fixed + per_mb x traffic through the two arms (a crude model: BLOCK_N 128
        # also halves the grid): the part of BLOCK_N 64's delta that is x's traffic
        d64, d128 = row["delta_us_block_n64"], row["delta_us_block_n128"]
        t64, t128 = row["x_extra_mb_block_n64"], row["x_extra_mb_block_n128"]
        per_mb = (d64 - d128) / (t64 - t128)
        row["linear_fit"] = {"traffic_us_block_n64": round(per_mb * t64, 2),
                             "rest_us": round(d64 - per_mb * t64, 2)}
        row["ratio_128_over_64"] = {m: round(us[n, k, m, "triton[block_n=128"]
                                             / us[n, k, m, "triton[block_n=64"], 3)
                                    for m in (1, 8, 16, 32)}
        out.append(row)
    return out


if __name__ == "__main__":
    res = {"gpu": "NVIDIA H200", "sources": [str(SCORECARD.relative_to(RESULTS)),
                                             str(CACHES.relative_to(RESULTS))],
           "same_config_m1_to_m32": scorecard_deltas(), "block_n_at_m32": block_n_at_m32(),
           "h100_one_config": {"gpu": "NVIDIA H100 80GB HBM3", "source": "slope/slope2.json",
                               "rows": h100_slope()}}
    (HERE / "m32_cost.json").write_text(json.dumps(res, separators=(",", ":")) + "\n")
    for r in res["same_config_m1_to_m32"]:
        print(r["shape"], r["us_m1"], r["us_m32"], "delta", r["delta_us"], "x extra MB",
              r["x_extra_mb"])
    for r in res["block_n_at_m32"]:
        print(r)
    for r in res["h100_one_config"]["rows"]:
        print(r)
