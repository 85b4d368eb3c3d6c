"""A few launches of one GEMM, Triton (the tuned-style config) or the Gluon W-first kernel, for
Nsight Compute (call7.sh): per_tensor, static activation scale, bf16 x in.

    ncu --section SpeedOfLight -k regex:'_w_first|_fp8_gemm_decode' python3 ncu_gluon.py \
        --arm gluon:64x512x4 --shape 5120x6144 --m 1
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gluon import GluonArm, parse_config

from fp8tower import backends
from fp8tower.formats import Scheme, quantize_weight


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", required=True, help="gluon:CONFIG or triton:JSON")
    ap.add_argument("--shape", required=True)
    ap.add_argument("--m", type=int, default=1)
    ap.add_argument("--launches", type=int, default=3)
    a = ap.parse_args()
    n, k = (int(v) for v in a.shape.split("x"))
    g = torch.Generator(device="cuda").manual_seed(0)
    w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, Scheme.PER_TENSOR,
                        act_scale=0.05)
    x = torch.randn(a.m, k, device="cuda", generator=g).bfloat16()
    kind, _, spec = a.arm.partition(":")
    if kind == "gluon":
        be, cfg = GluonArm(), parse_config(spec)
    else:
        be, cfg = backends.get("triton"), json.loads(spec)
    packed = be.packed_for(w)
    for _ in range(a.launches):
        be.run(x, w, packed, act_scale=None, bias=None, out_dtype=torch.bfloat16, config=cfg)
    torch.cuda.synchronize()


if __name__ == "__main__":
    main()
