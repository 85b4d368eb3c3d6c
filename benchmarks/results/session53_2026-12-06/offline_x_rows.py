"""Session 53: fp8_gemm.x_rows for channel_token (fused amax) and block128, offline for sm_90
(no GPU): the deep tile and the shared default's split tile (call2's arms) with x quantized
in the GEMM at M = 2, 4, 8 on 9216x4096, X_ROWS as committed against forced to 0 (the 16-row
tile) and, at M = 8, as call2 ran it (8 rows; since limited to 4 for these schemes), as
session 52's per_tensor (results/session52_2026-12-06/offline_x_rows.json), with counts
of PTX shuffles, divisions and shared-memory stores / loads (the kernel's PTX read as
offline._ptx_summary gets it). From the repository root:

    python benchmarks/results/session53_2026-12-06/offline_x_rows.py > \\
        benchmarks/results/session53_2026-12-06/offline_x_rows.json
"""

import json
import re

from fp8tower.formats import Scheme
from fp8tower.kernels import fp8_gemm, offline
from fp8tower.kernels.configs import SCHEME_ID
from fp8tower.kernels.offline import compile_gemm
from fp8tower.problem import GemmProblem

TILES = {"deep": {"block_n": 64, "block_k": 512, "split_k": 1, "num_warps": 4,
                  "num_stages": 4},
         "split": {"block_n": 64, "block_k": 256, "split_k": 2, "num_warps": 4,
                   "num_stages": 3}}
X_IN_GEMM = {Scheme.CHANNEL_TOKEN: {"fused_amax": True}, Scheme.BLOCK128: {"prequant": False}}
committed = fp8_gemm.x_rows
summary, seen = offline._ptx_summary, {}


def keep_ptx(ptx):  # the last build's PTX, for the counts below
    seen["ptx"] = ptx
    return summary(ptx)


offline._ptx_summary = keep_ptx
COUNTS = {"shfl": r"\bshfl\.", "div_rn": r"\bdiv\.rn\.", "st_shared": r"\bst\.shared",
          "ld_shared": r"\bld\.shared"}
rows = []
for scheme, mode in X_IN_GEMM.items():
    for m in (2, 4, 8):
        p = GemmProblem(m, 9216, 4096, scheme, capability=(9, 0))
        for name, tile in TILES.items():
            cfg = {**tile, **mode}
            arms = [("x_rows", committed), ("whole_tile", lambda *a: 0)]
            if m == 8:  # per_tensor's rule (up to 8 rows), as call2 measured these schemes
                arms.append(("x_rows_8", lambda s, f, m, bm: committed(0, f, m, bm)))
            for arm, fn in arms:
                fp8_gemm.x_rows = fn
                f = compile_gemm(p, cfg)
                ops = f.ptx_ops
                rows.append({"scheme": scheme.value, "m": m, "tile": name, "arm": arm,
                             "config": cfg, "x_rows": fn(SCHEME_ID[scheme], False, m, 16),
                             "registers": f.registers, "shared_bytes": f.shared_bytes,
                             "spill_bytes": f.spill_bytes,
                             "e4m3_cvt_ptx": ops.get("cvt.rn.satfinite.e4m3x2.f32", 0),
                             "wgmma_ptx": sum(v for k, v in ops.items()
                                              if k.startswith("wgmma")),
                             **{f"{k}_ptx": len(re.findall(v, seen["ptx"]))
                                for k, v in COUNTS.items()}})
print(json.dumps({"shape": "9216x4096", "target": "sm_90", "rows": rows}, indent=1))
