"""Every key the decode step moved in sessions 60-63's in-context runs (`tune --in-context
--json`, tower/context.py: each candidate's chain_delta_us, its time minus the replaced
choice's in the tuner's chain, us a call; step_delta_us, the same in the step, us a GEMM of
the key), split by why the chain alone had not chosen it:

- "tie: second copy": the chain ranked the new choice faster, but within cache.HOST_TIE, and
  it runs on tile-major weights (a second copy: cache.extra_weight_copy), so the tie rule
  kept the row-major one;
- "tie: host path": faster in the chain within HOST_TIE, on a backend with a dearer eager
  host path (cache.EAGER_HOST_US);
- "chain misranked": the chain timed the new choice slower; the step, faster.

No GPU:  python benchmarks/results/session63_2026-12-07/moves.py > .../moves.txt
"""

from __future__ import annotations

import json
from pathlib import Path

from fp8tower.tuning.cache import Measurement

RESULTS = Path(__file__).resolve().parents[1]
RUNS = ["session60_2026-12-07/ctx", "session60_2026-12-07/ctx2", "session60_2026-12-07/ctx32",
        "session61_2026-12-07/ctx", "session61_2026-12-07/ctx16", "session61_2026-12-07/ctx64",
        "session62_2026-12-07/ctx", "session62_2026-12-07/ctxb", "session63_2026-12-07/wo_ctx"]


def label(c: dict) -> str:
    """The candidate's label as tower/context.py wrote it into "kept" / "was"."""
    return Measurement(c["backend"], c["config"]).label


def why(cand: dict, was: dict) -> str:
    if cand["chain_delta_us"] >= 0:
        return "chain misranked"
    if cand["backend"] != was["backend"]:
        return "tie: host path"
    if (cand["config"] or {}).get("packed") and not (was["config"] or {}).get("packed"):
        return "tie: second copy"
    return "tie: other"


def main() -> None:
    counts: dict[str, list[float]] = {}
    for run in RUNS:
        for f in sorted((RESULTS / run).glob("tune_ctx_*.json")):
            d = json.loads(f.read_text())
            gpu = d.get("gpu", "?")
            for r in d["in_context"]:
                if not r.get("candidates") or r["kept"] == r["was"] or "ms_after" not in r:
                    continue
                was = r["candidates"][0]
                new = next((c for c in r["candidates"] if label(c) == r["kept"]), None)
                if new is None or "chain_delta_us" not in new:
                    print(f"{run} {r['key']}: no chain delta recorded")
                    continue
                w = why(new, was)
                share = r["ms_after"] / r["ms_before"]
                counts.setdefault(w, []).append(share)
                print(f"{gpu[:12]:12} {run.split('/')[0][:9]} {r['scheme']:13} M={r['m']:<3} "
                      f"{r['key'].split('_')[1]}x{r['key'].split('_')[2][1:]:<6} "
                      f"{w:17} chain {new['chain_delta_us']:+.3f} us, step "
                      f"{new['step_delta_us']:+.3f} us a GEMM x {r['gemms']}: the step "
                      f"{share:.4f}x  ({label(was)} -> {r['kept']})")
    print()
    for w, shares in sorted(counts.items()):
        print(f"{w}: {len(shares)} moves, the step {min(shares):.4f}-{max(shares):.4f}x")


if __name__ == "__main__":
    main()
