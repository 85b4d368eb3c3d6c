"""Session 70 (GPU): do CUTLASS's cluster builds (x multicast to 2 or 4 CTAs) compute what
the same schedule without a cluster computes? Same MMAs in the same order, so the outputs
must be bit-equal; also the SQNR against float64 on the same quantized operands (>= 40 dB,
DESIGN.md), the output NaN-poisoned first. N = 1088 (17 tiles of 64 rows) leaves the last
cluster partly outside the weight. Prints a table; writes JSON to argv[1].
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from bench_cutlass import weights  # its random FP8 weights and scales, as its numerics check

from fp8tower.backends import cutlass
from fp8tower.backends.act_quant import quantize as quantize_act
from fp8tower.formats import Scheme, sqnr_db

SHAPES = [(16384, 5120), (5120, 6144), (1088, 5120), (1024, 5120)]
MS = [1, 3, 8, 16, 17, 32]


def run(w, x, cfg):
    y = torch.full((x.shape[0], w.n), float("nan"), dtype=torch.bfloat16, device="cuda")
    cutlass.BACKEND.run(x, w, cutlass.BACKEND.packed_for(w), out_dtype=torch.bfloat16,
                        config=cfg, out=y)
    torch.cuda.synchronize()
    return y


def main(path):
    rows, bad = [], 0
    for scheme in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN):
        for n, k in SHAPES:
            w = weights(n, k, scheme, copies=1)[0]
            for m in MS:
                x = torch.randn(m, k, device="cuda").bfloat16()
                xq, sa = quantize_act(x, scheme, w.act_scale)
                wd = w.data.double() * w.scale.double().reshape(-1, 1)
                ref = (xq.double() * sa.double().reshape(-1, 1)) @ wd.t()
                tn = cutlass.token_tile(m)
                for sched, pdl in (("pf", True), ("pp", False)):
                    base = {"sched": sched, "tile": f"64x{tn}x128", "mode": "heuristic",
                            "splits": 1, "pdl": pdl}
                    y1 = run(w, x, base)
                    for c in (2, 4) if sched == "pf" else (2,):
                        r = {"scheme": scheme.value, "n": n, "k": k, "m": m, "sched": sched,
                             "cluster": c}
                        try:
                            yc = run(w, x, {**base, "cluster": c})
                        except cutlass.CutlassError as e:
                            r["error"] = str(e)[:300]
                            bad += 1
                            rows.append(r)
                            print(r, flush=True)
                            continue
                        r["nan"] = int(torch.isnan(yc).sum())
                        r["bit_equal"] = bool(torch.equal(yc, y1))
                        r["sqnr_db"] = round(sqnr_db(ref, yc), 2) if r["nan"] == 0 else None
                        r["sqnr_c1_db"] = round(sqnr_db(ref, y1), 2)
                        ok = r["bit_equal"] and r["nan"] == 0 and r["sqnr_db"] >= 40
                        bad += not ok
                        rows.append(r)
                        print(("ok  " if ok else "BAD ") + json.dumps(r), flush=True)
    with open(path, "w") as f:
        json.dump({"gpu": torch.cuda.get_device_name(), "rows": rows, "bad": bad}, f, indent=1)
    print(f"{len(rows)} cases, {bad} bad")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
