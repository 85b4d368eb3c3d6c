"""Per (scheme, N x K, M) of a bench_gemm.py JSON: each arm's us, % of the read ceiling, and
its ratio to the first arm's (arms in --backends order; errors named)."""

import json
import sys
from collections import defaultdict

with open(sys.argv[1]) as f:
    doc = json.load(f)
cells = defaultdict(list)
for r in doc["rows"]:
    cells[(r["scheme"], r["n"], r["k"], r["m"])].append(r)
for (scheme, n, k, m), rows in cells.items():
    first = rows[0].get("us")
    out = []
    for r in rows:
        if r.get("us") is None:
            out.append(f"{r['backend']}: {r.get('error', '?')[:60]}")
        else:
            out.append(f"{r['backend']}: {r['us']:.2f} ({r['pct_ceiling']:.1f}%, "
                       f"{r['us'] / first:.3f})")
    print(f"{scheme} {n}x{k} M={m}  " + "  ".join(out))
