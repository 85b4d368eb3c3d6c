"""Session 25: what the tuner's refinement step (configs.refinements) added, per key of a
tuning cache tuned with it: the winner before the step (the fastest of the candidates timed
before it, in measurement order) against the step's fastest candidate, both timed in the
same chain (1.0 where the step found nothing faster).

    PYTHONPATH=src python3 refine_gain.py TUNING_CACHE.json [...]
"""

import json
import sys
from pathlib import Path

from fp8tower.kernels.configs import refinements
from fp8tower.problem import GemmProblem
from fp8tower.tuning.cache import normalize_config


def pre_step(problem, cands):
    """(the winner before the refinement step, the step's candidates) from the candidates in
    measurement order: the longest prefix whose Triton winner's refinements (less those timed
    already) are the candidates that follow it."""
    for j in range(len(cands), 0, -1):
        ok = [c for c in cands[:j] if c.get("median_us")]
        if not ok:
            continue
        best = min(ok, key=lambda c: c["median_us"])
        if best["backend"] != "triton":
            continue
        seen = [c["config"] for c in cands[:j] if c["backend"] == "triton"]
        want = [normalize_config(r) for r in refinements(problem, best["config"])]
        want = [r for r in want if r not in seen]
        if want and [c["config"] for c in cands[j:j + len(want)]] == want:
            return best, cands[j:j + len(want)]
    return None, []


rows = []
for path in sys.argv[1:]:
    for key, e in json.loads(Path(path).read_text())["entries"].items():
        p = GemmProblem.from_dict(e["problem"]) if hasattr(GemmProblem, "from_dict") else None
        if p is None:
            d = e["problem"]
            p = GemmProblem(d["m"], d["n"], d["k"], d["scheme"], capability=tuple(d["capability"]),
                            static_act_scale=d.get("static_act_scale", False))
        before, step = pre_step(p, e["candidates"])
        if before is None:
            rows.append((key, None, None, 0))
            continue
        timed = [c["median_us"] for c in step if c.get("median_us")]
        after = min([before["median_us"], *timed])
        rows.append((key, before["median_us"], after, len(step)))
        print(f"{key[:44]:44s} before {before['median_us']:7.2f} after {after:7.2f}"
              f" ({before['median_us'] / after:.3f}x), {len(step)} timed")
gains = [b / a for _, b, a, n in rows if b]
print(f"{len(rows)} keys, {len(gains)} refined; gain > 1%: {sum(g > 1.01 for g in gains)}, "
      f"max {max(gains, default=1):.3f}x, timings added {sum(n for *_, n in rows)}")
