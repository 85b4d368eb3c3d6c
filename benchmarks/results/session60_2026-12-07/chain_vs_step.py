"""Chain against step, from session 60's in-context runs (ctx/, ctx2/; H100): for each key the
step re-ranked, each shortlisted candidate's time minus the current choice's in the tuner's
chain (us a call, from the cache the in-context pass started from) and in the step (ms per
step apart, per GEMM of the key: the 27B merged step runs 16384x5120 48 times, 5120x6144 64,
14336x5120 16; counted from fp8tower.models' spec). Since this session `tune --in-context
--json` writes both deltas itself (tower/context.py: chain_delta_us, step_delta_us).

    python benchmarks/results/session60_2026-12-07/chain_vs_step.py  # > chain_vs_step.json
"""

from __future__ import annotations

import gzip
import json
import statistics
import sys
from collections import Counter
from pathlib import Path

from fp8tower.models import get_spec
from fp8tower.tower.context import launch_kind
from fp8tower.tuning.cache import Measurement

HERE = Path(__file__).resolve().parent
RUNS = [("ctx", "per_tensor"), ("ctx2", "channel_token"), ("ctx2", "block128")]


def _load(path: Path):
    if path.exists():
        return json.loads(path.read_text())
    return json.loads(gzip.open(path.with_suffix(".json.gz")).read())


def _kind(backend: str, cfg: dict | None) -> str:
    """tower.context.launch_kind as a label."""
    b, pdl, prequant, fused = launch_kind(Measurement(backend, cfg))
    if b != "triton":
        return f"{b} pdl={pdl}"
    return f"triton pdl={pdl} prequant={prequant}" + (" fused_amax" if fused else "")


def main() -> None:
    spec = get_spec("qwen3.5-27b")
    count = Counter((g.n, g.k) for g in spec.gemms(("gdn", "attention"), merged=True))
    rows, moved = [], []
    for folder, scheme in RUNS:
        tune = _load(HERE / folder / f"tune_ctx_{scheme}.json")
        cache = _load(HERE / folder / f"tuning_cache_{scheme}_iso.json")["entries"]
        for r in tune["in_context"]:
            if r.get("kept") != r.get("was"):
                moved.append(f"{scheme} M={r['m']} {r['key']}: {r['was']} -> {r['kept']}")
            chain = {(c["backend"], json.dumps(c["config"], sort_keys=True)): c["median_us"]
                     for c in cache[r["key"]]["candidates"]}
            e = cache[r["key"]]["problem"]
            n_gemms = count[(e["n"], e["k"])]
            cands = r["candidates"]
            base = chain[(cands[0]["backend"], json.dumps(cands[0]["config"], sort_keys=True))]
            for c in cands[1:]:
                ch = chain[(c["backend"], json.dumps(c["config"], sort_keys=True))]
                step = (c["ms"] - cands[0]["ms"]) * 1e3 / n_gemms
                rows.append({"scheme": scheme, "m": r["m"], "shape": f"{e['n']}x{e['k']}",
                             "gemms": n_gemms, "backend": c["backend"], "config": c["config"],
                             "kind": _kind(c["backend"], c["config"]),
                             "chain_delta_us": round(ch - base, 3),
                             "step_delta_us": round(step, 3),
                             "step_minus_chain_us": round(step - (ch - base), 3)})
    by_kind: dict[str, list[float]] = {}
    for r in rows:
        key = f"{r['kind']} M={'32' if r['m'] == 32 else '1-8'}"
        by_kind.setdefault(key, []).append(r["step_minus_chain_us"])
    diffs = [r["step_minus_chain_us"] for r in rows]
    summary = {
        "candidates": len(rows),
        "median_step_minus_chain_us": round(statistics.median(diffs), 3),
        "step_wider_than_chain": sum(d > 0 for d in diffs),
        "by_kind": {k: {"n": len(v), "median_us": round(statistics.median(v), 3),
                        "min_us": round(min(v), 3), "max_us": round(max(v), 3)}
                    for k, v in sorted(by_kind.items())},
        "moved_keys": moved,
    }
    json.dump({"source": "session 60, ctx/ and ctx2/ (H100, 27B merged tower, torch stand-ins)",
               "summary": summary, "rows": rows}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
