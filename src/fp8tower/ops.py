"""``torch.ops.fp8tower.fp8_linear``: fp8_linear as one opaque torch.library custom op.

Under ``torch.compile`` Dynamo cannot trace the dispatch (cache lookups, ``data_ptr``, the
Triton launch), so :func:`fp8tower.fp8_linear` and :class:`fp8tower.Fp8Linear` call this op
when compiling: the graph holds one node per linear, its fake (meta) implementation gives
the output's shape and dtype, and the real one resolves the backend and runs it at run
time. Eager calls skip the op (no dispatcher overhead) and run the same code directly.

The op takes the weight's tensors, not an :class:`~fp8tower.formats.Fp8Weight`; the
Fp8Weight (which caches each backend's prepared weight, e.g. Triton's split-K counters) is
kept on the weight tensor itself, so every call on the same buffers reuses one prepared form,
eager or compiled. (A cycle tensor -> Fp8Weight -> tensor: the garbage collector frees it.)
"""

from __future__ import annotations

import torch
from torch import Tensor

from .formats import Fp8Weight, Scheme

_ATTR = "_fp8tower_weight"


def weight_for(
    data: Tensor, scale: Tensor, act_scale: Tensor | None, scheme: Scheme | str
) -> Fp8Weight:
    """The Fp8Weight over exactly these tensors, built once and kept on ``data``."""
    scheme = Scheme.parse(scheme)
    w = getattr(data, _ATTR, None)
    if w is None or w.scale is not scale or w.act_scale is not act_scale or w.scheme is not scheme:
        w = Fp8Weight(data, scale, scheme, act_scale)
        setattr(data, _ATTR, w)
    return w


def attach(weight: Fp8Weight) -> Fp8Weight:
    """Make ``weight`` the one :func:`weight_for` finds for its tensors (eager code calls it,
    so compiled calls reuse what eager warm-up prepared)."""
    if getattr(weight.data, _ATTR, None) is not weight:
        setattr(weight.data, _ATTR, weight)
    return weight


def forget(data: Tensor) -> None:
    """Drop the Fp8Weight kept on ``data`` (its values changed in place: re-prepare)."""
    if hasattr(data, _ATTR):
        delattr(data, _ATTR)


@torch.library.custom_op("fp8tower::fp8_linear", mutates_args=())
def fp8_linear_op(
    x: Tensor,
    weight: Tensor,
    weight_scale: Tensor,
    input_scale: Tensor | None,
    act_scale: Tensor | None,
    bias: Tensor | None,
    scheme: str,
    backend: str,
    out_dtype: torch.dtype,
) -> Tensor:
    """y (M, N) = x (M, K) @ W.T (+ bias) for a 2-D contiguous x; see linear.fp8_linear."""
    from .linear import run_2d

    w = weight_for(weight, weight_scale, input_scale, scheme)
    y = run_2d(x, w, bias=bias, act_scale=act_scale, backend=backend, out_dtype=out_dtype)
    # A custom op's output may not be a view (cuBLASLt pads M and returns a slice).
    return y if y._base is None else y.clone()


@fp8_linear_op.register_fake
def _fp8_linear_fake(x, weight, weight_scale, input_scale, act_scale, bias, scheme, backend,
                     out_dtype):
    return x.new_empty((x.shape[0], weight.shape[0]), dtype=out_dtype)
