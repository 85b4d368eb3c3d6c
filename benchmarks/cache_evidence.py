"""Facts drawn from a tuning cache's recorded candidates (no GPU): the evidence behind the
Triton defaults and the tuning shortcuts that cite it.

    python benchmarks/cache_evidence.py benchmarks/results/tuning_cache_all_H200_2026-11-29.json \
        --out benchmarks/results/tuning_cache_evidence_H200_2026-11-29.json

- prequant_vs_fused: per_tensor, per M, the first two Triton candidates (the default tile,
  fused in-kernel quant then the pre-pass): time ratio fused / pre-pass, per shape.
- same_winner_m1_16: per (scheme, shape), whether M = 1..16 chose the same backend and config,
  and how much slower M = 1's choice was than the winner at any of those buckets.
- builds_per_scheme: distinct Triton GEMM builds the cache's candidates needed, with the
  kernel specialized on M (M == 1, M % 16 == 0, other) and without (BLOCK_M only); the
  GDN + attention shapes (the MLP shapes were tuned in another run).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import re
import sys
from datetime import date

from fp8tower.kernels.configs import block_m_for

MLP_SHAPES = {(17408, 5120), (34816, 5120), (5120, 17408)}


def triton_candidates(e: dict) -> list[dict]:
    return [c for c in e["candidates"] if c["backend"] == "triton" and c["error"] is None]


def prequant_vs_fused(entries: dict) -> dict:
    out = collections.defaultdict(dict)
    for e in entries.values():
        p, tri = e["problem"], triton_candidates(e)
        if p["scheme"] != "per_tensor" or len(tri) < 2:
            continue
        fused, pre = tri[0], tri[1]
        same_tile = {k: v for k, v in fused["config"].items() if k != "prequant"} == \
            {k: v for k, v in pre["config"].items() if k != "prequant"}
        if same_tile and not fused["config"]["prequant"] and pre["config"]["prequant"]:
            out[p["m"]][f"{p['n']}x{p['k']}"] = {
                "fused_us": fused["median_us"], "prequant_us": pre["median_us"],
                "fused_over_prequant": fused["median_us"] / pre["median_us"]}
    return {str(m): dict(sorted(v.items())) for m, v in sorted(out.items())}


def key_without_m(key: str, p: dict) -> str:
    """The cache key minus its M (``m16_n10240_..._sm90`` -> ``n10240_..._sm90``): entries
    that differ in anything else (dtypes, -chs, static scale, capability) stay apart."""
    rest = re.sub(r"^m\d+_", "", key)
    if rest != key:
        return rest
    return json.dumps({f: v for f, v in p.items() if f != "m"}, sort_keys=True)


def same_winner_m1_16(entries: dict) -> dict:
    groups = collections.defaultdict(dict)
    for key, e in entries.items():
        p = e["problem"]
        if p["m"] <= 16:
            groups[(p["scheme"], p["n"], p["k"], key_without_m(key, p))][p["m"]] = e
    rows = []
    for (scheme, n, k, rest), by_m in sorted(groups.items()):
        choices = {(e["backend"], json.dumps(e["config"], sort_keys=True)) for e in by_m.values()}
        # What taking M = 1's choice at every bucket would have cost, where it was timed.
        first = by_m[min(by_m)]
        loss = 0.0
        for e in by_m.values():
            same = [c["median_us"] for c in e["candidates"] if c["error"] is None
                    and (c["backend"], c["config"]) == (first["backend"], first["config"])]
            best = min(c["median_us"] for c in e["candidates"] if c["error"] is None)
            if same:
                loss = max(loss, same[0] / best - 1)
        rows.append({"scheme": scheme, "shape": f"{n}x{k}", "key": rest, "buckets": sorted(by_m),
                     "same_winner": len(choices) == 1, "m1_choice_max_loss": loss})
    return {"groups": len(rows), "same": sum(r["same_winner"] for r in rows), "rows": rows}


def builds_per_scheme(entries: dict) -> dict:
    old, new = collections.defaultdict(set), collections.defaultdict(set)
    for e in entries.values():
        p = e["problem"]
        if (p["n"], p["k"]) in MLP_SHAPES:
            continue
        spec = "one" if p["m"] == 1 else ("div16" if p["m"] % 16 == 0 else "other")
        for c in e["candidates"]:
            if c["backend"] != "triton":
                continue
            cfg = json.dumps(c["config"], sort_keys=True)
            old[p["scheme"]].add((p["n"], p["k"], block_m_for(p["m"]), spec, cfg))
            new[p["scheme"]].add((p["n"], p["k"], block_m_for(p["m"]), cfg))
    return {s: {"specialized_on_m": len(old[s]), "block_m_only": len(new[s])} for s in sorted(old)}


def load(path: str) -> dict:
    """A tuning cache file, plain or gzip-compressed (.gz)."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cache", help="a tuning cache file (fp8tower tune)")
    ap.add_argument("--out", help="write the facts as JSON here")
    args = ap.parse_args(argv)
    raw = load(args.cache)
    doc = {
        "what": "facts from the candidates recorded in a tuning cache (no new timing)",
        "cache": args.cache, "measured_on": raw["meta"], "date": date.today().isoformat(),
        "command": " ".join(sys.argv),
        "prequant_vs_fused": prequant_vs_fused(raw["entries"]),
        "same_winner_m1_16": same_winner_m1_16(raw["entries"]),
        "builds_per_scheme": builds_per_scheme(raw["entries"]),
    }
    for m, shapes in doc["prequant_vs_fused"].items():
        ratios = ", ".join(f"{s} {v['fused_over_prequant']:.2f}" for s, v in shapes.items())
        print(f"per_tensor M={m}: fused / pre-pass time: {ratios}")
    sw = doc["same_winner_m1_16"]
    ties = [f"{r['scheme']} {r['shape']} (M=1's choice at most {100 * r['m1_choice_max_loss']:.1f}% slower)"
            for r in sw["rows"] if not r["same_winner"]]
    print(f"same winner at M = 1..16: {sw['same']} of {sw['groups']}; others: {', '.join(ties)}")
    print("builds per scheme:", json.dumps(doc["builds_per_scheme"]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(doc, f, indent=1)


if __name__ == "__main__":
    main()
