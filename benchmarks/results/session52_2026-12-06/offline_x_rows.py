"""Session 52: fp8_gemm.x_rows offline for sm_90 (no GPU): the deep tile and the shared
default's split tile with x quantized in the GEMM at M = 2, 4, 8 on 9216x4096, X_ROWS as
committed against forced to 0 (the 16-row tile). From the repository root:

    python benchmarks/results/session52_2026-12-06/offline_x_rows.py > \\
        benchmarks/results/session52_2026-12-06/offline_x_rows.json
"""

import json

from fp8tower.formats import Scheme
from fp8tower.kernels import fp8_gemm
from fp8tower.kernels.offline import compile_gemm
from fp8tower.problem import GemmProblem

TILES = {"deep": {"block_n": 64, "block_k": 512, "split_k": 1, "num_warps": 4,
                  "num_stages": 4, "prequant": False},
         "split": {"block_n": 64, "block_k": 256, "split_k": 2, "num_warps": 4,
                   "num_stages": 3, "prequant": False}}
committed = fp8_gemm.x_rows
rows = []
for m in (2, 4, 8):
    p = GemmProblem(m, 9216, 4096, Scheme.PER_TENSOR, capability=(9, 0), static_act_scale=True)
    for name, cfg in TILES.items():
        for arm, fn in (("x_rows", committed), ("whole_tile", lambda *a: 0)):
            fp8_gemm.x_rows = fn
            f = compile_gemm(p, cfg)
            ops = f.ptx_ops
            rows.append({"m": m, "tile": name, "arm": arm, "config": cfg,
                         "x_rows": fn(0, False, m, 16), "registers": f.registers,
                         "shared_bytes": f.shared_bytes, "spill_bytes": f.spill_bytes,
                         "e4m3_cvt_ptx": ops.get("cvt.rn.satfinite.e4m3x2.f32", 0),
                         "wgmma_ptx": sum(v for k, v in ops.items() if k.startswith("wgmma"))})
print(json.dumps({"shape": "9216x4096", "scheme": "per_tensor", "target": "sm_90",
                  "rows": rows}, indent=1))
