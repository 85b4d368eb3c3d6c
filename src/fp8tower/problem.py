"""GemmProblem: the dispatch key of one FP8 linear call."""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from .formats import Scheme, weight_scale_bytes

# Decode batch sizes are bucketed by powers of two: 1, 2, 4, ..., 64; larger M share
# the buckets 128, 256, ... (still powers of two). Above MAX_DECODE_M (prefill) dispatch
# neither tunes on a miss unless asked (dispatch.Dispatcher._may_tune) nor serves the Triton
# decode kernels untuned where cuBLASLt can serve (dispatch.Dispatcher.safe_default).
MAX_DECODE_M = 64


def m_bucket(m: int) -> int:
    """Smallest power of two >= m (m >= 1)."""
    if m < 1:
        raise ValueError(f"M must be >= 1, got {m}")
    return 1 << (m - 1).bit_length()


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


@dataclass(frozen=True)
class GemmProblem:
    """y (M, N) = x (M, K) @ W.T (K, N), W in FP8 with ``scheme`` scales."""

    m: int
    n: int
    k: int
    scheme: Scheme
    act_dtype: torch.dtype = torch.bfloat16
    out_dtype: torch.dtype = torch.bfloat16
    # (major, minor) of the CUDA device, or None for the CPU.
    capability: tuple[int, int] | None = None
    # The weight scale is a per-channel vector (per_tensor weights after an exact merge).
    channel_weight_scale: bool = False
    # per_tensor with a static activation scale (ModelOpt input_scale); False: dynamic.
    static_act_scale: bool = False
    # The call adds a bias: Triton fuses it in its epilogue, cuBLASLt / CUTLASS / cuDNN add it
    # with a separate kernel (2-3 us a launch in a graph), so
    # the ranking can differ from the bias-free one.
    has_bias: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "scheme", Scheme.parse(self.scheme))
        for name in ("m", "n", "k"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise ValueError(f"GemmProblem.{name} must be a positive int, got {v!r}")

    @property
    def bucket(self) -> int:
        return m_bucket(self.m)

    @property
    def on_cuda(self) -> bool:
        return self.capability is not None

    def weight_bytes(self) -> int:
        return self.n * self.k

    def bytes_moved(self) -> int:
        """Bytes one call must move: FP8 weights + scales + activations + output
        (+ the bias, where the call has one)."""
        act_item = 1 if self.act_dtype == torch.float8_e4m3fn else _itemsize(self.act_dtype)
        out_item = _itemsize(self.out_dtype)
        scale_bytes = weight_scale_bytes(self.scheme, self.n, self.k,
                                         channel=self.channel_weight_scale)
        bias_bytes = self.n * out_item if self.has_bias else 0  # read once (out_dtype)
        return (self.n * self.k + scale_bytes + self.m * self.k * act_item
                + self.m * self.n * out_item + bias_bytes)

    def key(self) -> str:
        """Cache key: M bucket, N, K, scheme (and its variants: -chs, -static, -bias), dtypes,
        device capability. A variant is in the key only when set, so keys of problems
        without it never change (committed caches under benchmarks/results/ stay valid)."""
        cap = "cpu" if self.capability is None else f"sm{self.capability[0]}{self.capability[1]}"
        vec = ("-chs" if self.channel_weight_scale else "") + (
            "-static" if self.static_act_scale else ""
        ) + ("-bias" if self.has_bias else "")
        return (
            f"m{self.bucket}_n{self.n}_k{self.k}_{self.scheme.value}{vec}_"
            f"{dtype_name(self.act_dtype)}_{dtype_name(self.out_dtype)}_{cap}"
        )

    @classmethod
    def for_call(
        cls, x: torch.Tensor, weight, out_dtype: torch.dtype, act_scale=None, *,
        bias: torch.Tensor | None = None,
    ) -> GemmProblem:
        """The problem a call of fp8_linear(x (M, K), weight, act_scale=..., bias=...) poses."""
        cap = _capability(x.device.index) if x.is_cuda else None
        m = x.shape[0]
        return cls(
            m=max(m, 1),
            n=weight.n,
            k=weight.k,
            scheme=weight.scheme,
            act_dtype=x.dtype,
            out_dtype=out_dtype,
            capability=cap,
            channel_weight_scale=weight.scheme is Scheme.PER_TENSOR and weight.scale.numel() > 1,
            static_act_scale=weight.scheme is Scheme.PER_TENSOR
            and (act_scale is not None or weight.act_scale is not None),
            has_bias=bias is not None,
        )


@functools.cache
def _capability(index: int | None) -> tuple[int, int]:
    """The device's compute capability, asked once (a CUDA query per call cost microseconds)."""
    return torch.cuda.get_device_capability(index)


def _itemsize(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()
