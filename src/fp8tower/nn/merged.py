"""Merge sibling FP8 projections (same input, same K, same scheme) into one GEMM.

Sibling projections that read the same activation (GDN ``in_proj_qkv`` + ``in_proj_z``,
attention q/k/v, MLP gate/up) run as one GEMM with their N stacked; each sibling's output
is then a view of the one (..., N_total) result (``y.split(sizes, dim=-1)``: no copies).

Two modes for the weight scales:

``exact`` (default)
    Each shard keeps its own scales, so the merged layer computes exactly what the shards
    did. per_tensor: the shards' scalars become one (N_total,) per-output-channel vector
    (a scalar is kept when every shard has the same one); channel_token / weight_only:
    their (N,) vectors are concatenated; block128: the block-scale rows are concatenated,
    which needs every shard but the last to have N a multiple of 128 (a block row must
    not straddle two shards). One activation quantization is shared, so per_tensor static
    input scales must be equal: different ones are an error naming the shards.

``requant_max``
    per_tensor only (the other schemes already have per-channel scales): dequantize each
    shard and requantize it with the largest shard scale, one scalar for the merged weight
    (what vLLM and TensorRT-LLM do when they merge per-tensor q/k/v). Static input scales
    that differ are replaced by their maximum, with a warning (as vLLM does).

Accuracy cost of ``requant_max`` (tests/test_merge.py measures it; CPU, 2026-11-29): shards
of 256 and 192 rows, K = 512, random normal weights of std 0.02 and 0.16 (1x and 8x), M = 16,
SQNR against the unquantized float64 product, over seeds 0-4:

===================================  ==============  ================
small (1x) shard                     exact           requant_max
===================================  ==============  ================
dequantized weight vs the original   31.5-31.6 dB    26.5-29.4 dB
layer output vs the unquantized one  28.5-28.8 dB    25.2-27.3 dB
===================================  ==============  ================

The large shard is unchanged (its scale is the max). The loss is smaller than a fixed-point
intuition suggests: E4M3 is floating point, so shrinking a shard by s_i / s_max keeps most of
its relative precision; what is lost is a second rounding (the ratio is not a power of two)
and the values pushed into the subnormals. ``exact`` loses nothing.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence

import torch
from torch import nn

from ..formats import BLOCK, FP8_DTYPE, FP8_MAX, ChoiceEnum, Fp8Weight, Scheme
from .linear import Fp8Linear, check_bias


class MergeMode(ChoiceEnum):
    EXACT = "exact"
    REQUANT_MAX = "requant_max"


class MergeError(ValueError):
    """Shards that cannot be merged (in this mode); the message names them."""


def _names(weights: Sequence[Fp8Weight], names: Sequence[str] | None) -> list[str]:
    if names is None:
        return [f"shard{i}" for i in range(len(weights))]
    if len(names) != len(weights):
        raise MergeError(f"{len(names)} names for {len(weights)} shards")
    return [str(n) for n in names]


def _check_shards(weights: Sequence[Fp8Weight], names: list[str]) -> None:
    if not weights:
        raise MergeError("nothing to merge: no shards given")
    first = weights[0]
    for w, name in zip(weights, names):
        if w.k != first.k:
            raise MergeError(
                f"shards read different inputs: {names[0]} has K={first.k}, {name} has K={w.k}"
            )
        if w.scheme is not first.scheme:
            raise MergeError(
                f"shards have different schemes: {names[0]} is {first.scheme}, "
                f"{name} is {w.scheme}"
            )
        if w.device != first.device:
            raise MergeError(f"shards on different devices: {names[0]} on {first.device}, "
                             f"{name} on {w.device}")
    static = [w.act_scale is not None for w in weights]
    if any(static) and not all(static):
        mixed = ", ".join(f"{n} ({'static' if s else 'dynamic'})" for n, s in zip(names, static))
        raise MergeError(f"shards mix static and dynamic input scales: {mixed}")


def _act_scale(weights: Sequence[Fp8Weight], names: list[str], mode: MergeMode):
    """The one static input scale the merged layer uses (None: dynamic)."""
    scales = [w.act_scale for w in weights]
    if scales[0] is None:
        return None
    values = [float(s) for s in scales]
    if len(set(values)) == 1:
        return scales[0].clone()
    listed = ", ".join(f"{n}={v:.6g}" for n, v in zip(names, values))
    if mode is MergeMode.EXACT:
        raise MergeError(
            f"exact merge shares one activation quantization, but the shards' static input "
            f"scales differ: {listed}; merge with mode='requant_max' to use their maximum"
        )
    warnings.warn(f"merging shards with different static input scales ({listed}): the merged "
                  f"layer uses their maximum, {max(values):.6g}", RuntimeWarning, stacklevel=4)
    return torch.stack([s.reshape(()) for s in scales]).amax()


def _exact_scale(weights: Sequence[Fp8Weight], names: list[str]) -> torch.Tensor:
    scheme = weights[0].scheme
    if scheme is Scheme.BLOCK128:
        for w, name in zip(weights[:-1], names[:-1]):
            if w.n % BLOCK:
                raise MergeError(
                    f"block128 exact merge: shard {name} has N={w.n}, not a multiple of "
                    f"{BLOCK}, so its last block row would straddle the next shard "
                    f"({', '.join(f'{n}: N={x.n}' for n, x in zip(names, weights))})"
                )
        return torch.cat([w.scale.float() for w in weights], dim=0)
    if scheme is Scheme.PER_TENSOR and all(w.scale.numel() == 1 for w in weights):
        scalars = torch.stack([w.scale.float().reshape(()) for w in weights])
        if bool((scalars == scalars[0]).all()):
            return scalars[0].clone()  # one scale already: nothing to preserve
    return torch.cat([w.channel_scale() for w in weights])


def _requant_max(weights: Sequence[Fp8Weight], names: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    scheme = weights[0].scheme
    if scheme is not Scheme.PER_TENSOR:
        raise MergeError(
            f"requant_max applies to per_tensor only ({scheme} already has per-channel "
            "scales: merge it with mode='exact')"
        )
    vector = [n for w, n in zip(weights, names) if w.scale.numel() != 1]
    if vector:
        raise MergeError(f"requant_max needs one scalar scale per shard; {vector} have vectors")
    scales = torch.stack([w.scale.float().reshape(()) for w in weights])
    top = scales.amax()
    # s_i <= top: the requantized values shrink, nothing saturates (the clamp is a guard).
    data = [
        (w.data.float() * (s / top)).clamp_(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)
        for w, s in zip(weights, scales)
    ]
    return torch.cat(data), top


def merge_weights(
    weights: Sequence[Fp8Weight],
    mode: str | MergeMode = MergeMode.EXACT,
    names: Sequence[str] | None = None,
) -> Fp8Weight:
    """One Fp8Weight with the shards' rows stacked in order (see the module doc for modes)."""
    mode = MergeMode.parse(mode)
    weights = list(weights)
    labels = _names(weights, names)
    _check_shards(weights, labels)
    act = _act_scale(weights, labels, mode)
    if mode is MergeMode.REQUANT_MAX:
        data, scale = _requant_max(weights, labels)
    else:
        data = torch.cat([w.data for w in weights])
        scale = _exact_scale(weights, labels)
    return Fp8Weight(data, scale, weights[0].scheme, act)


class MergedFp8Linear(nn.Module):
    """Sibling FP8 projections run as one GEMM; ``forward`` returns one view per shard.

    ``linear`` holds the merged weight (an :class:`Fp8Linear`, so ``backend`` and
    ``out_dtype`` work as there); ``names`` and ``sizes`` are the shards' names and N.
    """

    def __init__(self, linear: Fp8Linear, names: Sequence[str], sizes: Sequence[int],
                 mode: str | MergeMode = MergeMode.EXACT) -> None:
        super().__init__()
        if any(isinstance(s, bool) or not isinstance(s, int) or s <= 0 for s in sizes):
            raise MergeError(f"shard sizes must be positive ints, got {list(sizes)}")
        if sum(sizes) != linear.out_features or len(names) != len(sizes):
            raise MergeError(f"shard sizes {list(sizes)} (names {list(names)}) do not add up "
                             f"to the merged N={linear.out_features}")
        self.linear = linear
        self.names = tuple(names)
        self.sizes = tuple(int(s) for s in sizes)
        self.mode = MergeMode.parse(mode)

    @classmethod
    def from_weights(
        cls,
        weights: Sequence[Fp8Weight],
        names: Sequence[str] | None = None,
        mode: str | MergeMode = MergeMode.EXACT,
        biases: Sequence[torch.Tensor | None] | None = None,
        **kw,
    ) -> MergedFp8Linear:
        """Merge Fp8Weights; ``biases`` (all or none); ``kw`` go to Fp8Linear (backend, ...)."""
        weights = list(weights)
        labels = _names(weights, names)
        bias = None
        if biases is not None and len(biases) != len(weights):
            raise MergeError(f"{len(biases)} biases for {len(weights)} shards {labels}")
        if biases is not None and any(b is not None for b in biases):
            if any(b is None for b in biases):
                raise MergeError(f"some shards have a bias and some do not: {labels}")
            for b, w, name in zip(biases, weights, labels):
                check_bias(b.contiguous(), w.n, w.device, f"bias of shard {name}")
            bias = torch.cat(list(biases))
        merged = merge_weights(weights, mode, labels)
        linear = Fp8Linear.from_weight(merged, bias, **kw)
        return cls(linear, labels, [w.n for w in weights], mode)

    @classmethod
    def from_linears(
        cls,
        linears: Sequence[Fp8Linear],
        names: Sequence[str] | None = None,
        mode: str | MergeMode = MergeMode.EXACT,
    ) -> MergedFp8Linear:
        """Merge Fp8Linear modules; they must share backend and out_dtype."""
        linears = list(linears)
        labels = _names(linears, names)
        for attr in ("backend", "out_dtype"):
            values = {getattr(lin, attr) for lin in linears}
            if len(values) > 1:
                raise MergeError(f"shards {labels} have different {attr}: {sorted(map(str, values))}")
        first = linears[0] if linears else None
        kw = {} if first is None else {"backend": first.backend, "out_dtype": first.out_dtype}
        return cls.from_weights([lin.fp8_weight() for lin in linears], labels, mode,
                                [lin.bias for lin in linears], **kw)

    @property
    def in_features(self) -> int:
        return self.linear.in_features

    @property
    def out_features(self) -> int:
        return self.linear.out_features

    @property
    def scheme(self) -> Scheme:
        return self.linear.scheme

    @property
    def backend(self) -> str:
        return self.linear.backend

    @backend.setter
    def backend(self, value: str) -> None:
        self.linear.backend = value

    @property
    def out_dtype(self) -> torch.dtype | None:
        return self.linear.out_dtype

    @out_dtype.setter
    def out_dtype(self, value: torch.dtype | None) -> None:
        # without this, nn.Module stored a plain attribute nothing read (2026-12-05 audit)
        self.linear.out_dtype = value

    def fp8_weight(self) -> Fp8Weight:
        return self.linear.fp8_weight()

    def forward_merged(self, x: torch.Tensor) -> torch.Tensor:
        """The one (..., N_total) result."""
        return self.linear(x)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """One (..., N_i) view of the merged result per shard, in order (no copies)."""
        return self.forward_merged(x).split(self.sizes, dim=-1)

    def extra_repr(self) -> str:
        shards = ", ".join(f"{n}={s}" for n, s in zip(self.names, self.sizes))
        return f"shards=({shards}), mode={self.mode.value}"


def merge_linears(
    linears: Sequence[Fp8Linear],
    names: Sequence[str] | None = None,
    mode: str | MergeMode = MergeMode.EXACT,
) -> MergedFp8Linear:
    """Merge sibling Fp8Linear modules into one MergedFp8Linear (see the module doc)."""
    return MergedFp8Linear.from_linears(linears, names, mode)
