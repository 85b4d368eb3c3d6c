"""Where the 27B per_tensor tower's M = 32 step goes beyond M = 1's, op by op, from session
65's paired traces on an H200 (../session65_2026-12-07/c8/attr_m1.json, attr_m32.json:
`trace attribute` of the merged tower tuned from cold, benchmarks/results/session54_2026-12-06/
call8.sh), and what #12's M = 32 target (within 10% of M = 1) leaves to cut. Writes gap.json:
    .venv/bin/python benchmarks/results/session68_2026-12-07/gap.py
"""
import json
from pathlib import Path

HERE = Path(__file__).parent
C8 = HERE.parent / "session65_2026-12-07" / "c8"
TARGET = 1.10  # M = 32 within 10% of M = 1


def main() -> None:
    att = {m: json.loads((C8 / f"attr_m{m}.json").read_text()) for m in (1, 32)}
    step = {m: att[m]["total"]["ms_per_step"] for m in att}
    by_label = {m: {r["label"]: r for r in att[m]["ops"]} for m in att}
    excess = step[32] - step[1]
    rows = []
    for label, one in by_label[1].items():
        big = by_label[32][label]
        d_ms = big["ms_per_step"] - one["ms_per_step"]
        rows.append({"op": label, "calls": one["calls_per_step"],
                     "backend_m1": one["backends"], "backend_m32": big["backends"],
                     "ms_m1": round(one["ms_per_step"], 4), "ms_m32": round(big["ms_per_step"], 4),
                     "extra_ms": round(d_ms, 4), "share_of_extra": round(d_ms / excess, 3),
                     "extra_us_a_call": round(1e3 * d_ms / one["calls_per_step"], 2)})
    rows.sort(key=lambda r: -r["extra_ms"])
    doc = {"gpu": att[1]["meta"]["gpu"],
           "source": "../session65_2026-12-07/c8/attr_m{1,32}.json",
           "step_ms": {"m1": round(step[1], 4), "m32": round(step[32], 4)},
           "ratio": round(step[32] / step[1], 4), "target_ratio": TARGET,
           "to_cut_ms": round(step[32] - TARGET * step[1], 4), "ops": rows}
    (HERE / "gap.json").write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"M=1 {step[1]:.3f} ms, M=32 {step[32]:.3f} ms ({doc['ratio']}); "
          f"to cut for {TARGET}: {doc['to_cut_ms']} ms")
    for r in rows:
        print(f"  {r['op']:34s} {r['calls']:4.0f} calls  +{r['extra_ms']:.4f} ms "
              f"({r['share_of_extra']:.0%}, {r['extra_us_a_call']:+.2f} us a call) "
              f"{r['backend_m1']} -> {r['backend_m32']}")


if __name__ == "__main__":
    main()
