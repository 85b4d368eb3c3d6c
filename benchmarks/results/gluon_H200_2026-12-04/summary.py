"""The table a bench_gluon call prints: per chain, each (shape, M) row's best time an arm (us,
the fastest of its rounds), and any row that failed its output check.

    python3 summary.py OUT_DIR    # reads OUT_DIR/gluon_model.json and OUT_DIR/gluon_gemm.json
"""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path


def main(out_dir: str) -> None:
    for chain in ("model", "gemm"):
        d = json.loads((Path(out_dir) / f"gluon_{chain}.json").read_text())
        t = collections.defaultdict(list)
        for r in d["rows"]:
            if "us" in r:
                t[(r["n"], r["k"], r["m"], r["arm"])].append(r["us"])
            elif "error" in r:
                print("ERR", r)
        print(chain, d["ceiling_gbps"])
        arms = list(dict.fromkeys(k[3] for k in t))
        print("shape M " + " ".join(f"{a:>10}" for a in arms))
        for k in sorted({k[:3] for k in t}):
            cells = (f"{min(t[(*k, a)]):10.2f}" if t[(*k, a)] else f"{'-':>10}" for a in arms)
            print(f"{k[0]}x{k[1]} {k[2]} " + " ".join(cells))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: summary.py OUT_DIR")
    main(sys.argv[1])
