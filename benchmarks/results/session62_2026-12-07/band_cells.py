"""Every untuned per_tensor cell of the H100's open band (133-159 programs of BLOCK_N 64,
K > 5120, M = 2-8, where the shared default serves) in the committed results, with its ratio
to cuBLASLt timed in the same file and the default's config (no GPU; session 62).

    .venv/bin/python benchmarks/results/session62_2026-12-07/band_cells.py > band_cells.txt
"""
import collections
import json
from pathlib import Path

from fp8tower.formats import Scheme
from fp8tower.kernels.configs import default_config, waves
from fp8tower.problem import GemmProblem

RESULTS = Path(__file__).resolve().parents[1]


def cells():
    out = collections.defaultdict(list)
    for f in sorted(RESULTS.glob("**/*.json")):
        try:
            d = json.loads(f.read_text())
        except (ValueError, UnicodeDecodeError):
            continue
        if not isinstance(d, dict) or not isinstance(d.get("rows"), list):
            continue
        rows = [r for r in d["rows"] if isinstance(r, dict) and r.get("scheme") == "per_tensor"
                and {"n", "k", "m"} <= r.keys() and r.get("us")]
        cub = {(r["n"], r["k"], r["m"]): r["us"] for r in rows if r.get("backend") == "cublaslt"}
        for r in rows:
            key = (r["n"], r["k"], r["m"])
            if r.get("backend") == "untuned" and key in cub and 132 < -(-r["n"] // 64) < 160 \
                    and r["k"] > 5120 and 2 <= r["m"] <= 8:
                gpu = "H100" if "H100" in str(d.get("gpu")) else "H200"
                out[key[:2]].append((r["m"], round(cub[key] / r["us"], 3), gpu,
                                     str(f.relative_to(RESULTS))))
    return out


def main():
    for (n, k), runs in sorted(cells().items()):
        p = GemmProblem(8, n, k, Scheme.PER_TENSOR, capability=(9, 0))
        cfg = default_config(p)
        steps = -(-k // cfg["block_k"]) // cfg["split_k"]
        print(f"{n}x{k}: {cfg}, {waves(cfg, p):.2f} waves, {steps} K steps a split")
        for m, ratio, gpu, path in sorted(runs):
            print(f"    M = {m}  {ratio:.3f}x cuBLASLt  {gpu}  {path}")


if __name__ == "__main__":
    main()
