"""One GEMM config (Triton, or another backend with --backend), launched a few times, for Nsight Compute to profile (issue #12):
where a variant's time goes (stall reasons, memory throughput) where timings alone cannot say.

    ncu --section SpeedOfLight --section WarpStateStats -k regex:_fp8_gemm_decode_kernel \\
        --launch-skip 2 --launch-count 1 python3 benchmarks/ncu_gemm.py --scheme block128 \\
        --shape 16384x5120 --m 1 --config '{"block_n": 64, "block_k": 256, "split_k": 1,
        "num_warps": 4, "num_stages": 4, "prequant": false}'

benchmarks/verify_h200.sh's ``ncu`` step runs it for the configs it names.
"""

from __future__ import annotations

import argparse
import json

import torch

from fp8tower import backends
from fp8tower.formats import Scheme, quantize_weight


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scheme", required=True, choices=[s.value for s in Scheme])
    ap.add_argument("--shape", required=True, help="NxK of the weight, e.g. 16384x5120")
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--config", required=True, help="the backend's config, as JSON")
    ap.add_argument("--backend", default="triton", help="a registered backend (default triton)")
    ap.add_argument("--launches", type=int, default=3)
    a = ap.parse_args()
    n, k = (int(v) for v in a.shape.lower().split("x"))
    scheme = Scheme(a.scheme)
    g = torch.Generator(device="cuda").manual_seed(0)
    w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, scheme,
                        act_scale=0.05 if scheme is Scheme.PER_TENSOR else None)
    x = torch.randn(a.m, k, device="cuda", generator=g).bfloat16()
    be = backends.get(a.backend)
    packed = be.packed_for(w)
    cfg = json.loads(a.config)
    for _ in range(a.launches):
        y = be.run(x, w, packed, config=cfg)
    torch.cuda.synchronize()
    print(f"{a.scheme} {n}x{k} M={a.m} {cfg}: y[0, :4] = {y[0, :4].tolist()}")


if __name__ == "__main__":
    main()
