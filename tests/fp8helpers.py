"""Test helpers shared by the numerics tests."""

import torch

from fp8tower.formats import BLOCK, FP8_DTYPE, FP8_MAX, Scheme, amax_scale, quantize_activation


def exact_activations(m: int, k: int, scheme: Scheme, scale: float = 0.05, seed: int = 0,
                      dtype: torch.dtype = torch.bfloat16):
    """Random (m, k) activations in ``dtype`` whose quantization under ``scheme`` gives FP8
    grid values with no rounding the CPU interpreter gets wrong: its fp32 -> fp8 cast is
    wrong when rounding carries into the exponent (DESIGN.md), and it rounds ties away from
    zero where torch and the GPU round them to even (17 -> 18 against 16, 232 -> 240
    against 224; triton 3.9, 2026-12-05), so in-kernel quantization is tested on the CPU
    with these (grid values: no rounding, no ties); the GPU tests use general random
    activations.

    Built in ``dtype``, not cast to it afterwards: grid values g times s, rounded to
    ``dtype``, then, where |g| is a power of two and x / s fell below it, moved one ``dtype``
    ulp away from zero. So x / s rounds to g with no carry (never just below a power of
    two), in the reference and in the kernels alike (checked here). The old helper's fp32
    grid * 0.05, cast to fp16 by the caller, put 7.999 where 8 was meant (the carry: 16-23
    dB on the interpreter); bf16 escaped only because 0.05 rounds up in bf16.

    s: for per_tensor ``scale`` (its static scale; no element at 448 s), for weight_only
    the same values (it quantizes no x); for channel_token and block128 the dynamic scale
    of the +-448 * scale put in column 0 of each token / 1x128 group, as rounded to
    ``dtype``: ``scale`` itself where 448 * scale is a ``dtype`` value (a power of two such
    as 2^-4; any scale in fp32), else within a ``dtype`` ulp of it. A ValueError where
    ``dtype`` cannot hold such values (a scale too small for fp16's range)."""
    g = torch.Generator().manual_seed(seed)
    grid = (torch.randn(m, k, generator=g) * 64).clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE).float()
    if scheme is Scheme.CHANNEL_TOKEN:
        grid[:, 0] = FP8_MAX
    elif scheme is Scheme.BLOCK128:
        grid[:, ::BLOCK] = -FP8_MAX
    s = torch.tensor(scale, dtype=torch.float32)
    if scheme in (Scheme.CHANNEL_TOKEN, Scheme.BLOCK128):  # the group max as it will be
        s = amax_scale((FP8_MAX * s).to(dtype).float())
    x = (grid * s).to(dtype)
    # |g| a power of two: where a quotient just below |g| would carry into the exponent
    pow2 = (grid != 0) & ((grid.view(torch.int32) & 0x7FFFFF) == 0)
    low = pow2 & ((x.float() / s).abs() < grid.abs())
    if bool(low.any()):  # one ulp away from zero: +1 on the magnitude's bits
        ints = {torch.bfloat16: torch.int16, torch.float16: torch.int16,
                torch.float32: torch.int32}[dtype]
        bits = x.view(ints)
        x = torch.where(low, bits + 1, bits).view(dtype)
    quotient = x.float() / s
    # the reference's own quantization (weight_only quantizes no x: checked as per_tensor)
    static = torch.tensor(scale) if scheme in (Scheme.PER_TENSOR, Scheme.WEIGHT_ONLY) else None
    q = quantize_activation(x, scheme if static is None else Scheme.PER_TENSOR, static)[0]
    q = q.float()
    carries = pow2 & (quotient.abs() < grid.abs())
    if not torch.equal(q, grid) or bool(carries.any()):
        bad = int(((q != grid) | carries).sum())
        raise ValueError(f"exact_activations: {dtype} cannot hold FP8 grid values times "
                         f"{scale} so that they quantize back exactly ({bad} of "
                         f"{grid.numel()} would not); expected a scale within its range")
    return x


def random_weight(n: int, k: int, seed: int = 1) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, k, generator=g) * 0.02


def fake_blockwise_api(got: dict, result=None, inside: list | None = None):
    """A stand-in for torch.nn.functional's block-wise ``scaled_mm`` API (the CPU build has
    none), for backends/cublaslt.py: records the operands' layouts in ``got`` (a: shape, sa:
    (shape, strides)) and returns ``result(a, b, sa, sb)`` (default zeros) in the output
    dtype; ``inside[0]`` is True while it computes (a dispatch-mode counter skips those)."""

    class FakeF:
        class ScalingType:
            BlockWise1x128, BlockWise128x128 = "1x128", "128x128"

        @staticmethod
        def scaled_mm(a, b, sa, ta, sb, tb, output_dtype):
            got.update(a=tuple(a.shape), sa=(tuple(sa.shape), sa.stride()))
            if inside is not None:
                inside[0] = True
            try:
                y = (result(a, b, sa, sb) if result is not None
                     else torch.zeros(a.shape[0], b.shape[1]))
                return y.to(output_dtype)
            finally:
                if inside is not None:
                    inside[0] = False

    return FakeF
