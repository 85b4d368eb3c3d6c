"""A plain streaming read (Triton): each program sums a strided share of a buffer.

The honest read ceiling for the GEMMs' weight streams: on the H200 (2026-11-29) it read
4.39 TB/s where torch's int32 sum read 0.77 TB/s (benchmarks/sweep_triton.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl


@triton.jit
def _read_kernel(p, out, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(pid * BLOCK, n, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(p + offs, mask=offs < n, other=0.0)
    tl.store(out + pid, tl.sum(acc))


def streaming_read(buf: torch.Tensor, out: torch.Tensor, programs: int, block: int = 2048):
    """Read every float32 of ``buf`` once; ``out`` needs ``programs`` floats."""
    _read_kernel[(programs,)](buf, out, buf.numel(), BLOCK=block, num_warps=8)
