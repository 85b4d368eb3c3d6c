"""cuBLASLt backend: ``torch._scaled_mm`` (per-tensor and row-wise scales) and
``torch.nn.functional.scaled_mm`` (128x128 block-wise weights, 1x128 activation groups).

The baseline every other backend must beat. Activations are quantized by a separate
launch before the GEMM (``act_quant.quantize``), as vLLM does.
"""

from __future__ import annotations

import torch

from ..formats import FP8_DTYPE, Fp8Weight, Scheme
from ..problem import GemmProblem
from . import Backend, act_quant

# cuBLASLt FP8 needs K and N multiples of 16 (torch checks the same).
_ALIGN = 16
_BLOCKWISE_M_ALIGN = 16


def _unavailable() -> str | None:
    if not hasattr(torch, "_scaled_mm"):
        return f"torch {torch.__version__} has no torch._scaled_mm"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (cuBLASLt)"
    if torch.cuda.get_device_capability() < (8, 9):
        return f"FP8 GEMMs need compute capability >= 8.9, got {torch.cuda.get_device_capability()}"
    return None


def _blockwise_api():
    import torch.nn.functional as F

    if hasattr(F, "scaled_mm") and hasattr(F, "ScalingType"):
        return F
    return None


def _check(p: GemmProblem) -> str | None:
    if p.capability is None:
        return "needs a CUDA tensor (cuBLASLt)"
    if p.scheme is Scheme.WEIGHT_ONLY:
        return "cuBLASLt FP8 GEMMs need FP8 on both operands; weight_only keeps bf16 activations"
    if p.n % _ALIGN or p.k % _ALIGN:
        return f"cuBLASLt FP8 needs N and K multiples of {_ALIGN}, got N={p.n}, K={p.k}"
    rowwise = p.scheme is Scheme.CHANNEL_TOKEN or p.channel_weight_scale
    if rowwise and p.out_dtype != torch.bfloat16:
        return f"row-wise scaled _scaled_mm writes bfloat16 only, asked for {p.out_dtype}"
    if p.scheme is Scheme.BLOCK128:
        if _blockwise_api() is None:
            return f"torch {torch.__version__} has no torch.nn.functional.scaled_mm (block-wise)"
        if p.capability != (9, 0):
            return (f"cuBLASLt block-wise FP8 runs on sm_90 only, this is "
                    f"sm_{p.capability[0]}{p.capability[1]}")
        if p.k % 128 or p.n % 128:
            return f"cuBLASLt block-wise FP8 needs N and K multiples of 128, got N={p.n}, K={p.k}"
        if p.out_dtype != torch.bfloat16:
            return f"cuBLASLt block-wise FP8 writes bfloat16 only, asked for {p.out_dtype}"
    return None


def _prepare(weight: Fp8Weight) -> dict:
    # _scaled_mm wants mat2 (K, N) column-major: W (N, K) row-major transposed is exactly that.
    packed = {"wt": weight.data.t()}
    if weight.scheme is Scheme.BLOCK128:
        # (L4, N/128) with strides (1, L4), L4 = K/128 rounded up to 4 (torch's check for the
        # 1x128 x 128x128 recipe; K=1280 was refused on the H200: "scale_b must have shape
        # 12 x 8"). The padding K-blocks multiply no K-block of x.
        nb, kb = weight.scale.shape
        padded = weight.scale.new_ones((nb, -(-kb // 4) * 4), dtype=torch.float32)
        padded[:, :kb] = weight.scale
        packed["scale_b"] = padded.t()
    elif weight.scale.numel() > 1:
        packed["scale_b"] = weight.scale.float().reshape(1, -1).contiguous()  # (1, N)
    else:
        packed["scale_b"] = weight.scale.float().reshape(())
    return packed


def _run(
    x, weight, packed, *, act_scale=None, bias=None, out_dtype=torch.bfloat16, config=None, out=None
):
    scheme = weight.scheme
    scale_b = packed["scale_b"]
    if scheme is Scheme.BLOCK128:
        y = _blockwise(x, weight, packed, act_scale, out_dtype)
    elif scale_b.dim() == 2:
        # Row-wise: scale_a (M, 1), scale_b (1, N). A static per_tensor scale is written once a
        # row by the quant launch itself (an expand().contiguous() after it was one more
        # launch at M > 1: the 2026-12-06 benchmark audit)
        m = x.shape[0]
        rows = None
        if x.dtype != FP8_DTYPE and scheme is Scheme.PER_TENSOR and m > 1:
            rows = torch.empty(m, 1, dtype=torch.float32, device=x.device)
        xq, sa = _quantize(x, weight, act_scale, s_out=rows)
        if sa.shape != (m, 1):
            sa = sa.float().reshape(-1, 1).expand(m, 1).contiguous()
        y = torch._scaled_mm(xq, packed["wt"], scale_a=sa, scale_b=scale_b, out_dtype=out_dtype)
    else:
        xq, sa = _quantize(x, weight, act_scale)
        if sa.dim() > 0:  # FP8 per_tensor x with (M, 1) rows, a scalar weight scale
            sb = scale_b.reshape(1, 1).expand(1, weight.n).contiguous()
            y = torch._scaled_mm(xq, packed["wt"], scale_a=sa.reshape(-1, 1).contiguous(),
                                 scale_b=sb, out_dtype=out_dtype)
        else:
            y = torch._scaled_mm(xq, packed["wt"], scale_a=sa, scale_b=scale_b,
                                 out_dtype=out_dtype)
    if bias is not None:
        y = y + bias.to(out_dtype)
    return y if out is None else out.copy_(y)


def _quantize(x, weight, act_scale, s_out=None):
    """(FP8 x, its scale) as _scaled_mm takes them: FP8 x as given (per_tensor's scale a
    float scalar, or (M, 1) rows as a launch plan's quant writes them), else quantized by the
    one separate launch."""
    if x.dtype == FP8_DTYPE:
        xq, sa = act_quant.for_gemm(x, weight, act_scale)
        if weight.scheme is Scheme.PER_TENSOR and sa.numel() == 1:
            sa = sa.float().reshape(())
        return xq, sa
    static = act_scale if act_scale is not None else weight.act_scale
    return act_quant.quantize(x, weight.scheme, static, s_out=s_out)


def blockwise_x_buffers(m: int, k: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    """(FP8 x (M16, K), 1x128 scales (M16, ceil(K/128)) with strides (1, M16)), M16 = M
    rounded up to 16: the layout F.scaled_mm's block-wise call takes, for the quant launch
    to write rows :M of in place (here, and in a launch plan: nn/plan._quant_first_plan)."""
    mp = -(-m // _BLOCKWISE_M_ALIGN) * _BLOCKWISE_M_ALIGN
    return (torch.empty(mp, k, dtype=FP8_DTYPE, device=device),
            torch.empty_strided((mp, -(-k // 128)), (1, mp), dtype=torch.float32,
                                device=device))


def _blockwise(x, weight, packed, act_scale, out_dtype):
    """block128 on F.scaled_mm: M padded to 16 (cuBLASLt refused M = 3,
    CUBLAS_STATUS_NOT_SUPPORTED, H200) and the 1x128 scales M-major (strides (1, M)). With
    bf16 x the quant launch writes both layouts itself: the padded rows are never written
    and their outputs dropped (a row's output reads only its own x and scales). Before, the
    padding and the M-major copy were 5 launches beside the GEMM at M < 16 (zeros, cat,
    ones, cat, copy) and 1 at M = 16 / 32: about 5 us a GEMM, 0.6 ms of the 27B tower's
    merged cuBLASLt step (2026-12-06 benchmark audit; sessions 19 / 37 / 38's block128
    cuBLASLt arms ran faster at M = 16 than at M <= 8)."""
    F = _blockwise_api()
    m, k = x.shape
    mp = -(-m // _BLOCKWISE_M_ALIGN) * _BLOCKWISE_M_ALIGN
    if x.dtype != FP8_DTYPE:
        xq, sa = blockwise_x_buffers(m, k, x.device)
        act_quant.quantize(x, Scheme.BLOCK128, None, q=xq[:m], s_out=sa[:m])
    else:  # FP8 x and its (M, K/128) scales: a launch plan's, laid out so already (below)
        xq, sa = act_quant.for_gemm(x, weight, act_scale)
        if mp != m:
            xq = torch.cat([xq, xq.new_zeros(mp - m, k)])
            sa = torch.cat([sa, sa.new_ones(mp - m, sa.shape[1])])
        if sa.stride() != (1, mp):
            sa = torch.empty_strided(sa.shape, (1, mp), dtype=torch.float32,
                                     device=sa.device).copy_(sa)
    return F.scaled_mm(
        xq, packed["wt"], sa, F.ScalingType.BlockWise1x128,
        packed["scale_b"], F.ScalingType.BlockWise128x128, output_dtype=out_dtype,
    )[:m]


BACKEND = Backend(
    name="cublaslt",
    # cuBLASLt FP8 kernels (nvjet_*, sm90_xmma_gemm_*, cutlass-based *gemm*), its split-K
    # reduction, plus the activation-quant launch (ours in Triton, or aten's elementwise ops).
    kernel_family=r"nvjet|xmma|gemm|cublas|splitKreduce|_fp8_act_quant|elementwise|reduce_kernel",
    description="torch._scaled_mm / F.scaled_mm (cuBLASLt); separate activation-quant launch",
    unavailable_reason=_unavailable,
    check=_check,
    prepare=_prepare,
    run=_run,
)
