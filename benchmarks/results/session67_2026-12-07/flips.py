"""Session 67, offline (no GPU): which tuned keys would move onto CUTLASS if its chain time
fell by ``s`` us (the PDL pre-pass of cutlass_prepass_pdl.patch), from session 65's H200
caches tuned from cold. Per key: CUTLASS's best chain time with PDL against the best other
backend's; a key already on CUTLASS is left out. Writes flips.json beside this file.
    .venv/bin/python benchmarks/results/session67_2026-12-07/flips.py"""
import gzip
import json
from pathlib import Path

HERE = Path(__file__).resolve().parent
CACHES = HERE.parent / "session65_2026-12-07" / "ab"
SAVINGS = (0.5, 1.0, 1.5, 2.0)


def gaps(entries: dict) -> list[dict]:
    out = []
    for e in entries.values():
        ok = [c for c in e.get("candidates", []) if c.get("median_us") and not c.get("error")]
        cut = [c["median_us"] for c in ok if c["backend"] == "cutlass" and c["config"].get("pdl")]
        other = [c["median_us"] for c in ok if c["backend"] != "cutlass"]
        if e["backend"] == "cutlass" or not cut or not other:
            continue
        p = e["problem"]
        out.append({"m": p["m"], "shape": f"{p['n']}x{p['k']}", "chosen": e["backend"],
                    "best_other_us": round(min(other), 2), "cutlass_us": round(min(cut), 2),
                    "gap_us": round(min(cut) - min(other), 2)})
    return sorted(out, key=lambda g: (g["m"], g["shape"]))


def main() -> None:
    doc = {"source": "benchmarks/results/session65_2026-12-07/ab/tuning_cache_*.json.gz",
           "schemes": {}}
    for scheme in ("per_tensor", "channel_token", "block128"):
        f = CACHES / f"tuning_cache_{scheme}.json.gz"
        g = gaps(json.loads(gzip.decompress(f.read_bytes()))["entries"])
        moves = {str(s): [f"M{k['m']} {k['shape']} ({k['gap_us']:+.2f})" for k in g
                          if k["gap_us"] < s] for s in SAVINGS}
        doc["schemes"][scheme] = {"gaps": g, "moves_at_saving_us": moves}
        for s, m in moves.items():
            print(scheme, s, m or "none")
    (HERE / "flips.json").write_text(json.dumps(doc) + "\n")


if __name__ == "__main__":
    main()
