"""Sum up before_after.sh's run (no GPU): the 27B merged tower's ms/step with the code of
2026-11-30 (before) and this checkout (after), every timing of each, the speedup after over
before, the M = 8 / 32 ratios to M = 1 of each, and #12's targets (the ms ones judged only on
an H200, the GPU they are set for). Writes ba.json beside it.

    .venv/bin/python benchmarks/results/session69_2026-12-07/ba.py ba1 ba2
        # each DIR: one call's unpacked ba/ (relative to this folder); writes ba.json
"""

import json
import re
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TARGET_M1 = {"per_tensor": 1.85, "channel_token": 2.2, "block128": 2.3}
TARGET_RATIO = {8: 1.05, 32: 1.10}


def timings(folder: Path, arm: str, scheme: str) -> dict[int, list[float]]:
    """M -> every ms/step of this arm and scheme: each file's row (its rounds' median)."""
    out: dict[int, list[float]] = {}
    for f in sorted(folder.glob(f"tower_{arm}_{scheme}_*.json")):
        for r in json.loads(f.read_text())["rows"]:
            if r["status"] == "ok" and r["arm"] == "merged" and r["backend"] == "auto":
                out.setdefault(r["m"], []).append(round(r["ms_per_step"], 4))
    return out


def main(folders: list[Path]) -> dict:
    statuses = [(f / "status.txt").read_text() for f in folders]
    gpus = sorted({re.search(r"gpu: (.*)", s).group(1) for s in statuses})
    tune_s = {m[0]: int(m[1]) for s in statuses
              for m in re.findall(r"tune_before_(\w+) rc=0 s=(\d+)", s)}
    result = {"gpu": gpus, "folders": [f.name for f in folders],
              "source": "before_after.sh; tower_{before,after}_*.json",
              "tune_before_s": tune_s, "schemes": {}}
    ceilings = [json.loads(p.read_text())["read_ceiling_gbps"]
                for f in folders for p in sorted(f.glob("tower_*.json"))]
    result["read_ceiling_gbps"] = sorted({round(c) for c in ceilings if c})
    for scheme in ("per_tensor", "channel_token", "block128"):
        b, a = {}, {}
        for f in folders:
            for got, arm in ((b, "before"), (a, "after")):
                for m, ts in timings(f, arm, scheme).items():
                    got.setdefault(m, []).extend(ts)
        if not (a and b):
            continue
        rows = {}
        for m in sorted(set(a) & set(b)):
            mb, ma = statistics.median(b[m]), statistics.median(a[m])
            rows[m] = {"before_ms": b[m], "after_ms": a[m], "before_median": round(mb, 4),
                       "after_median": round(ma, 4), "speedup": round(mb / ma, 3)}
        for arm in ("before", "after"):
            base = rows.get(1, {}).get(f"{arm}_median")
            for m, r in rows.items():
                if base and m != 1:
                    r[f"{arm}_ratio_to_m1"] = round(r[f"{arm}_median"] / base, 3)
        m1 = rows.get(1, {}).get("after_median")
        on_h200 = all("H200" in g for g in gpus)  # the targets are the H200's
        result["schemes"][scheme] = {
            "rows": rows,
            "m1_target_ms": TARGET_M1[scheme],
            "m1_met": m1 <= TARGET_M1[scheme] if (m1 is not None and on_h200) else None,
            "ratio_targets_met_on_this_gpu": {m: rows[m]["after_ratio_to_m1"] <= t
                                              for m, t in TARGET_RATIO.items()
                                              if m in rows and "after_ratio_to_m1" in rows[m]},
        }
    return result


if __name__ == "__main__":
    res = main([HERE / d for d in sys.argv[1:]])
    (HERE / "ba.json").write_text(json.dumps(res, separators=(",", ":")) + "\n")
    for s, d in res["schemes"].items():
        for m, r in d["rows"].items():
            print(s, m, r)
