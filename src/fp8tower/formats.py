"""FP8 formats, scale schemes and the reference quantization math.

FP8 here is E4M3 (``torch.float8_e4m3fn``): finite only, saturating at +-448.

Scale convention (the one cuBLASLt, vLLM and the checkpoints use): a scale *decodes*,
``real = fp8 * scale``; quantizing divides by it: ``fp8 = sat(real / scale)``.

Schemes and their scale shapes (N output channels, K input features, M tokens):

================  ===========================  ==========================================
scheme            weight scale                 activation scale
================  ===========================  ==========================================
per_tensor        one float (or a per-channel  one static float (ModelOpt ``input_scale``);
                  (N,) vector after a merge)   ``None`` means dynamic: amax of x per call
channel_token     (N,) per output channel      (M,) per token, dynamic
block128          (ceil(N/128), ceil(K/128))   (M, ceil(K/128)): 1x128 groups, dynamic
weight_only       (N,) per output channel      none: bf16/fp16 activations stay as they are
================  ===========================  ==========================================

block128 with N or K not a multiple of 128: the last block row/column is partial (it covers
the remaining rows/columns and its scale is their amax / 448). No padding is stored; every
backend handles the partial blocks or refuses the problem with a reason.
"""

from __future__ import annotations

import enum
import functools
import math
import re
from dataclasses import InitVar, dataclass, field

import torch

FP8_DTYPE = torch.float8_e4m3fn
FP8_MAX = 448.0
BLOCK = 128
# Smallest scale we produce: keeps an all-zero row/block from dividing by zero.
MIN_SCALE = 1e-12
# Largest static activation scale accepted: the kernels' division clamps x to +-1024 scales
# first (kernels/fp8_gemm._div_by_scale), which overflows fp32 above ~3.3e35, and then an
# inf in x would quantize to NaN instead of +-448. Such a scale would mean activations
# beyond fp32's range.
ACT_SCALE_MAX = 1e35
# Smallest static activation scale accepted: fp32's smallest normal. The kernels divide by
# the reciprocal r = 1 / s (kernels/fp8_gemm._div_by_scale); for a subnormal s r overflows
# (s = 1e-39, triton 3.9 interpreter, 2026-12-05: the corrected quotient NaN for every x,
# zeros included; x * (1 / s) 448 for x = 1e-37, where torch's x / s is 100). A normal s
# keeps r <= 2^126 (tests/test_formats.py).
ACT_SCALE_MIN = 2.0**-126
ACT_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


class ChoiceEnum(str, enum.Enum):
    """A str Enum parsed from user input ("Per-Tensor" -> per_tensor); a bad value gets an
    error naming it ("scheme", "merge mode": from the class name) and the choices."""

    @classmethod
    def parse(cls, value):
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).strip().lower().replace("-", "_"))
        except ValueError:
            choices = ", ".join(s.value for s in cls)
            what = re.sub(r"(?<!^)(?=[A-Z])", " ", cls.__name__).lower()
            raise ValueError(f"unknown {what} {value!r}: expected one of {choices}") from None

    def __str__(self) -> str:
        return self.value


class Scheme(ChoiceEnum):
    """How an FP8 linear layer is scaled."""

    PER_TENSOR = "per_tensor"
    CHANNEL_TOKEN = "channel_token"
    BLOCK128 = "block128"
    WEIGHT_ONLY = "weight_only"


class ScaleError(ValueError):
    """Fp8Weight's refusal of one of its scales; ``field`` names it ("scale" or "act_scale"),
    so a caller can name the tensor it read without parsing the message."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field

    def __reduce__(self):  # pickles with its field (the default would drop it)
        return type(self), (str(self), self.field)


def check_scale_values(t: torch.Tensor, what: str) -> None:
    """A scale tensor must be floating point, finite and > 0 everywhere: a zero or negative
    scale flips or erases every output it touches, a NaN poisons them all. One pass over the
    tensor (a device sync on a GPU): for build and load time, never per call."""
    if not t.is_floating_point():
        raise ValueError(f"{what} must be a floating-point tensor, got {t.dtype}")
    if t.numel() == 0 or t.device.type == "meta":
        return
    t = t.detach()
    bad = ~(torch.isfinite(t) & (t > 0))
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0].tolist())
        value = float(t[idx]) if idx else float(t)
        where = f" at index {idx}" if idx else ""
        raise ValueError(
            f"{what} must be finite and > 0, got {value}{where} "
            f"({int(bad.sum())} bad value(s) of {t.numel()})"
        )


def check_act_scale_range(value: float, what: str) -> None:
    """A static activation scale's value must be finite and lie in ACT_SCALE_MIN..ACT_SCALE_MAX
    (a larger one overflows the quantization's reciprocal, a smaller one is subnormal or 0 in
    float32); ``what`` names it in the ValueError. The one check of every place a static
    scale comes in: Fp8Weight, quantize_weight, fp8_linear's number, checkpoint reports."""
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{what} must be a finite number > 0, got {value}")
    if value > ACT_SCALE_MAX:
        raise ValueError(f"{what} must be at most {ACT_SCALE_MAX:g}, got {value:g}")
    if value < ACT_SCALE_MIN:
        raise ValueError(f"{what} must be at least {ACT_SCALE_MIN:g} (fp32's smallest normal), "
                         f"got {value:g}")


def _check_field(field: str, t: torch.Tensor, what: str) -> None:
    """check_scale_values, its refusal as a ScaleError naming Fp8Weight's ``field``."""
    try:
        check_scale_values(t, what)
    except ValueError as e:
        raise ScaleError(str(e), field) from None


def _values_checkable(*tensors: torch.Tensor | None) -> bool:
    """False while tracing (torch.compile: fake tensors) or capturing a CUDA graph, where
    reading values is impossible; the weights were checked when they were built."""
    if torch.compiler.is_compiling():
        return False
    for t in tensors:
        if t is None:
            continue
        if type(t) is not torch.Tensor and not isinstance(t, torch.nn.Parameter):
            return False  # FakeTensor and other subclasses
        if t.is_cuda and torch.cuda.is_current_stream_capturing():
            return False
    return True


def _check_finite(t: torch.Tensor, what: str) -> None:
    bad = ~torch.isfinite(t)
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0].tolist())
        count = int(bad.sum())
        raise ValueError(
            f"{what} has {count} non-finite value(s); the first is {t[idx].item()} at index {idx}"
        )


def _saturate_cast(t: torch.Tensor) -> torch.Tensor:
    return t.clamp(-FP8_MAX, FP8_MAX).to(FP8_DTYPE)


@functools.cache
def _fp8_max_on(device: torch.device) -> torch.Tensor:
    return torch.full((), FP8_MAX, dtype=torch.float32, device=device)


def amax_scale(amax: torch.Tensor) -> torch.Tensor:
    """The dynamic scale of an amax: amax / 448 (IEEE-rounded, as the kernels' div_rn),
    at least MIN_SCALE. The divisor is a tensor: on CUDA, torch divides by a Python scalar
    through its reciprocal, 1 ulp off the quotient for about half the values (H200
    2026-12-01, results/fast_token_prepass_H200_2026-12-01/gplan_formats_scalar_division.log);
    one cached 0-dim tensor per device, so no extra kernel per call (under CUDA graph capture
    a fresh one, filled by the graph: a cached tensor made there would be filled on replay
    only)."""
    a = amax.float()
    if a.is_cuda and torch.cuda.is_current_stream_capturing():
        div = torch.full((), FP8_MAX, dtype=torch.float32, device=a.device)
    else:
        div = _fp8_max_on(a.device)
    return (a / div).clamp_min(MIN_SCALE)


def block_scales_expand(scale: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """(ceil(N/128), ceil(K/128)) block scales -> (N, K) element scales."""
    return scale.repeat_interleave(BLOCK, 0)[:n].repeat_interleave(BLOCK, 1)[:, :k]


def _blockwise_amax(w: torch.Tensor) -> torch.Tensor:
    n, k = w.shape
    nb, kb = -(-n // BLOCK), -(-k // BLOCK)
    padded = torch.zeros(nb * BLOCK, kb * BLOCK, dtype=torch.float32, device=w.device)
    padded[:n, :k] = w.float().abs()
    return padded.view(nb, BLOCK, kb, BLOCK).amax(dim=(1, 3))


@dataclass
class Fp8Weight:
    """A quantized weight: FP8 data (N, K) row-major plus its scales.

    ``scale`` decodes ``data`` (see the module docstring for its shape per scheme).
    ``act_scale`` is the static per-tensor activation scale of the per_tensor scheme
    (None: dynamic). ``packed`` caches each backend's prepared form (``prepare`` runs once).

    Construction checks the shapes, and the scale values (finite, > 0: `check_scale_values`)
    unless ``check_values=False`` (a temporary view of tensors already checked) or while
    tracing or capturing a CUDA graph. A refused scale raises :class:`ScaleError` (a
    ValueError) naming its field.
    """

    data: torch.Tensor
    scale: torch.Tensor
    scheme: Scheme
    act_scale: torch.Tensor | None = None
    # init=False: dataclasses.replace(w, scale=s) builds a fresh cache (sharing w's gave the
    # new weight w's prepared data: 0.5x the reference for a doubled scale; 2026-12-05 audit)
    packed: dict = field(default_factory=dict, init=False, repr=False, compare=False)
    check_values: InitVar[bool] = True

    def __post_init__(self, check_values: bool) -> None:
        for name in ("data", "scale", "act_scale"):
            t = getattr(self, name)
            if not isinstance(t, torch.Tensor) and not (name == "act_scale" and t is None):
                raise TypeError(f"Fp8Weight.{name} must be a torch.Tensor"
                                + (" or None" if name == "act_scale" else "")
                                + f", got {type(t).__name__}")
        self.scheme = Scheme.parse(self.scheme)
        if self.data.dtype != FP8_DTYPE or self.data.dim() != 2:
            raise ValueError(
                f"Fp8Weight.data must be a 2-D {FP8_DTYPE} tensor, got {self.data.dtype} "
                f"of shape {tuple(self.data.shape)}"
            )
        n, k = self.data.shape
        if n == 0 or k == 0:  # as quantize_weight refuses it (no GEMM serves it)
            raise ValueError(f"Fp8Weight.data must have N and K > 0, got shape {(n, k)}")
        expected = expected_weight_scale_shapes(self.scheme, n, k)
        if tuple(self.scale.shape) not in expected:
            raise ScaleError(
                f"{self.scheme} weight scale for a {n}x{k} weight must have shape "
                f"{' or '.join(str(s) for s in expected)}, got {tuple(self.scale.shape)}",
                "scale",
            )
        if self.act_scale is not None and self.act_scale.numel() != 1:
            raise ScaleError(f"act_scale must be one value, got shape "
                             f"{tuple(self.act_scale.shape)}", "act_scale")
        if self.act_scale is not None and self.act_scale.dim() != 0:
            # one value in any shape ((1,) as checkpoints store it): held as the 0-dim tensor
            # every consumer expects (Fp8Linear's input_scale buffer, merges)
            self.act_scale = self.act_scale.reshape(())
        if self.act_scale is not None and self.scheme is not Scheme.PER_TENSOR:
            # every path would ignore it (their activations are quantized per token / group)
            raise ScaleError(f"act_scale (static activation scale) applies to per_tensor "
                             f"only, not {self.scheme}", "act_scale")
        if check_values:
            self.check_scales()
        object.__setattr__(self, "_built", True)

    def check_scales(self) -> None:
        """Refuse scale values no backend computes with (:class:`ScaleError`): not finite,
        not > 0, an act_scale outside ACT_SCALE_MIN..ACT_SCALE_MAX. Reads the scales (a
        device sync on a GPU); does nothing while tracing or capturing a CUDA graph."""
        if not _values_checkable(self.scale, self.act_scale):
            return
        n, k = self.data.shape
        _check_field("scale", self.scale, f"{self.scheme} weight scale ({n}x{k} weight)")
        if self.act_scale is not None:
            _check_field("act_scale", self.act_scale, "act_scale (static activation scale)")
            try:
                check_act_scale_range(float(self.act_scale), "act_scale (static activation "
                                      "scale)")
            except ValueError as e:
                raise ScaleError(str(e), "act_scale") from None

    def __setattr__(self, name: str, value) -> None:
        """A field reassigned after construction (``w.scale = s``): the backends' prepared
        forms (``packed``) and the compiled op's registration were made from the old
        tensors, so they are dropped, and the weight is checked again as construction checks
        it (2026-12-05 audit: the Triton backend went on with the old scale). Where a new
        shape needs data and scale together, build a new one: ``dataclasses.replace``."""
        if name not in _FIELDS or not self.__dict__.get("_built"):
            object.__setattr__(self, name, value)
            return
        old = self.__dict__.get(name)
        object.__setattr__(self, name, value)
        object.__setattr__(self, "_built", False)  # __post_init__'s own assignments: plain
        try:
            self.__post_init__(True)
        except BaseException:
            object.__setattr__(self, name, old)  # refused: the weight stays as it was
            object.__setattr__(self, "_built", True)
            raise
        # accepted: what was made from the old tensors goes
        for forget in ON_REASSIGN:
            forget(self)
        object.__setattr__(self, "packed", {})

    def __getstate__(self) -> dict:
        """A copy or a pickle carries the tensors, not what was made from them: the prepared
        forms (device buffers, launch plans holding compiled kernels, which do not pickle:
        `torch.save(model)` failed after the compiled op's first call, 2026-12-05 audit) and
        the registration of the compiled op, keyed by the original's tensors (a copy keeping
        it was never registered by its own). Both are made again on first use."""
        state = dict(self.__dict__)
        state["packed"] = {}
        state.pop("_ops_key", None)
        state.pop("_ops_versions", None)
        return state

    @property
    def shape(self) -> tuple[int, int]:
        return tuple(self.data.shape)  # type: ignore[return-value]

    @property
    def n(self) -> int:
        return self.data.shape[0]

    @property
    def k(self) -> int:
        return self.data.shape[1]

    @property
    def device(self) -> torch.device:
        return self.data.device

    def channel_scale(self) -> torch.Tensor:
        """The weight scale as an (N,) float32 vector (per_tensor/channel schemes)."""
        if self.scheme is Scheme.BLOCK128:
            raise ValueError("block128 weights have no per-channel scale vector")
        return self.scale.float().reshape(-1).expand(self.n).contiguous()

    def kernel_scale(self) -> torch.Tensor:
        """The weight scale as fp8tower's kernels read it: block128's (ceil(N/128),
        ceil(K/128)) float32 block scales, else the (N,) vector of :meth:`channel_scale`."""
        if self.scheme is Scheme.BLOCK128:
            return self.scale.float().contiguous()
        return self.channel_scale()

    def nbytes(self) -> int:
        """Bytes a GEMM reads of this weight: the FP8 data and the weight scale (the static
        act_scale, 4 bytes, is counted with the activations)."""
        return self.data.numel() + self.scale.numel() * self.scale.element_size()

    def to(self, device: torch.device | str) -> Fp8Weight:
        act = None if self.act_scale is None else self.act_scale.to(device)
        # values were checked when this weight was built; a move does not change them
        return Fp8Weight(
            self.data.to(device), self.scale.to(device), self.scheme, act, check_values=False
        )

    def dequantize(self, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return dequantize(self, dtype)


_FIELDS = ("data", "scale", "scheme", "act_scale")  # what Fp8Weight.__setattr__ guards
# Called with a weight whose field was reassigned: registries keyed by its old tensors drop
# it (nn/ops.py adds its own; this module imports nothing of the layers above it).
ON_REASSIGN: list = []


# The one table of weight scale shapes per scheme, for an (N, K) weight: every accepted
# shape, the canonical one first. per_tensor also takes (1,) and, after an exact merge of
# shards with different scalars, an (N,) vector (nn/merged.py). Scales are float32.
_SCALE_SHAPES = {
    Scheme.PER_TENSOR: lambda n, k: [(), (1,), (n,)],
    Scheme.CHANNEL_TOKEN: lambda n, k: [(n,)],
    Scheme.WEIGHT_ONLY: lambda n, k: [(n,)],
    Scheme.BLOCK128: lambda n, k: [(-(-n // BLOCK), -(-k // BLOCK))],
}
SCALE_ITEMSIZE = 4  # float32


def expected_weight_scale_shapes(scheme: Scheme, n: int, k: int) -> list[tuple[int, ...]]:
    """Every scale shape an (N, K) weight of ``scheme`` accepts, the canonical one first."""
    return _SCALE_SHAPES[Scheme.parse(scheme)](n, k)


def weight_scale_shape(
    scheme: Scheme, n: int, k: int, *, channel: bool = False
) -> tuple[int, ...]:
    """The scale shape of an (N, K) weight: the canonical one, or with ``channel`` a
    per_tensor weight's (N,) vector (as after an exact merge)."""
    scheme = Scheme.parse(scheme)
    if channel and scheme is Scheme.PER_TENSOR:
        return (n,)
    return expected_weight_scale_shapes(scheme, n, k)[0]


def weight_scale_bytes(scheme: Scheme, n: int, k: int, *, channel: bool = False) -> int:
    """Bytes of the scales of an (N, K) weight (:func:`weight_scale_shape`, float32)."""
    return math.prod(weight_scale_shape(scheme, n, k, channel=channel)) * SCALE_ITEMSIZE


def quantize_weight(
    w: torch.Tensor, scheme: Scheme | str, *, act_scale: float | torch.Tensor | None = None
) -> Fp8Weight:
    """Quantize a (N, K) high-precision weight to FP8 with the scheme's scales (each the
    amax of its tensor, row or 128x128 block over 448). ``act_scale``: per_tensor's static
    activation scale, a number or one-element tensor in ACT_SCALE_MIN..ACT_SCALE_MAX (None:
    x's scale is computed per call). A non-finite weight is refused."""
    scheme = Scheme.parse(scheme)
    if w.dim() != 2:
        raise ValueError(f"weight must be 2-D (N, K), got shape {tuple(w.shape)}")
    if not w.is_floating_point() or w.dtype == FP8_DTYPE:
        raise ValueError(f"weight must be a bf16/fp16/fp32 tensor, got {w.dtype}")
    if w.numel() == 0:
        raise ValueError(f"weight must have N >= 1 and K >= 1, got shape {tuple(w.shape)}")
    _check_finite(w, f"weight of shape {tuple(w.shape)}")
    w32 = w.float()
    n, k = w.shape
    if scheme is Scheme.PER_TENSOR:
        scale = amax_scale(w32.abs().amax())
        data = _saturate_cast(w32 / scale)
    elif scheme in (Scheme.CHANNEL_TOKEN, Scheme.WEIGHT_ONLY):
        scale = amax_scale(w32.abs().amax(dim=1))
        data = _saturate_cast(w32 / scale[:, None])
    else:
        scale = amax_scale(_blockwise_amax(w32))
        data = _saturate_cast(w32 / block_scales_expand(scale, n, k))
    act = None
    if act_scale is not None:
        if scheme is not Scheme.PER_TENSOR:
            raise ValueError(f"a static act_scale only applies to per_tensor, not {scheme}")
        act = _as_scale_tensor(act_scale, w.device)
    return Fp8Weight(data.contiguous(), scale.float(), scheme, act)


def _as_scale_tensor(value: float | torch.Tensor, device: torch.device) -> torch.Tensor:
    if not isinstance(value, (int, float, torch.Tensor)) or isinstance(value, bool):
        raise TypeError(f"act_scale must be a number or a one-element tensor, got "
                        f"{type(value).__name__} {value!r}")
    t = value if isinstance(value, torch.Tensor) else torch.tensor(float(value),
                                                                 dtype=torch.float64)
    if t.numel() != 1:
        raise ValueError(f"act_scale must be one value, got shape {tuple(t.shape)}")
    check_act_scale_range(float(t.reshape(())), "act_scale")  # as given: 1e39 is not "inf"
    return t.to(dtype=torch.float32, device=device).reshape(())


def dequantize(weight: Fp8Weight, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The (N, K) weight the FP8 data and scales stand for."""
    d = weight.data.float()
    s = weight.scale.float()
    if weight.scheme is Scheme.BLOCK128:
        out = d * block_scales_expand(s, weight.n, weight.k)
    elif s.dim() == 1 and s.numel() == weight.n:
        out = d * s[:, None]
    else:
        out = d * s.reshape(())
    return out.to(dtype)


# ----------------------------------------------------------------------------- activations


def quantize_act_per_tensor(
    x: torch.Tensor, scale: torch.Tensor | float | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) -> FP8 with one scale: the static one given, else dynamic amax/448."""
    x32 = x.float()
    if scale is None:
        s = amax_scale(x32.abs().amax())
    else:
        s = torch.as_tensor(scale, dtype=torch.float32, device=x.device).reshape(())
    return _saturate_cast(x32 / s), s


def quantize_act_per_token(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) -> FP8 and (M,) dynamic per-token scales."""
    x32 = x.float()
    s = amax_scale(x32.abs().amax(dim=-1))
    return _saturate_cast(x32 / s[:, None]), s


def quantize_act_group128(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(M, K) -> FP8 and (M, ceil(K/128)) dynamic scales of 1x128 groups."""
    m, k = x.shape
    kb = -(-k // BLOCK)
    padded = torch.zeros(m, kb * BLOCK, dtype=torch.float32, device=x.device)
    padded[:, :k] = x.float()
    s = amax_scale(padded.abs().view(m, kb, BLOCK).amax(dim=-1))
    q = _saturate_cast(padded.view(m, kb, BLOCK) / s[:, :, None]).view(m, kb * BLOCK)[:, :k]
    return q.contiguous(), s


def quantize_activation(
    x: torch.Tensor, scheme: Scheme, act_scale: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Quantize (M, K) activations as the scheme says; weight_only returns x unchanged."""
    if scheme is Scheme.PER_TENSOR:
        return quantize_act_per_tensor(x, act_scale)
    if scheme is Scheme.CHANNEL_TOKEN:
        return quantize_act_per_token(x)
    if scheme is Scheme.BLOCK128:
        return quantize_act_group128(x)
    return x, None


def dequantize_activation(
    q: torch.Tensor, scale: torch.Tensor | None, scheme: Scheme
) -> torch.Tensor:
    if scheme is Scheme.WEIGHT_ONLY:
        return q.float()
    if scheme is Scheme.PER_TENSOR:
        return q.float() * scale.reshape(())
    if scheme is Scheme.CHANNEL_TOKEN:
        return q.float() * scale[:, None]
    return q.float() * scale.repeat_interleave(BLOCK, 1)[:, : q.shape[1]]


def sqnr_db(ref: torch.Tensor, out: torch.Tensor) -> float:
    """20*log10(|ref| / |ref - out|) in float64, element by element; NaN anywhere in out
    gives -inf. The element counts must match (a broadcast would hide an output of the wrong
    shape: (1, N) against (M, N) gave inf)."""
    if ref.numel() != out.numel():
        raise ValueError(f"sqnr_db: ref has shape {tuple(ref.shape)}, out "
                         f"{tuple(out.shape)}; expected the same number of elements")
    r = ref.double().reshape(-1)
    o = out.double().reshape(-1)
    if not bool(torch.isfinite(o).all()):
        return float("-inf")
    err = torch.linalg.vector_norm(r - o)
    if float(err) == 0.0:
        return float("inf")
    return float(20 * torch.log10(torch.linalg.vector_norm(r) / err))
