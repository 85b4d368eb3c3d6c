"""Fp8Linear (nn.Module) and the functional fp8_linear."""

from __future__ import annotations

import math

import torch
from torch import nn

from .. import backends, dispatch
from ..backends import Backend
from ..formats import (
    ACT_DTYPES,
    FP8_DTYPE,
    FP8_MAX,
    MIN_SCALE,
    Fp8Weight,
    ScaleError,
    Scheme,
    _values_checkable,
    check_act_scale_range,
    expected_weight_scale_shapes,
    quantize_weight,
)
from . import ops
from . import plan as _plan


def check_bias(bias: torch.Tensor, n: int, device: torch.device, what: str = "bias") -> None:
    """A bias is a contiguous 1-D floating tensor of N elements on the weight's device
    (attribute reads only: no GPU sync)."""
    if bias.dim() != 1 or bias.shape[0] != n or not bias.is_floating_point() \
            or bias.device != device:
        raise ValueError(f"{what} must be a 1-D floating tensor of N={n} elements on {device}, "
                         f"got {bias.dtype} of shape {tuple(bias.shape)} on {bias.device}")
    if not bias.is_contiguous():
        raise ValueError(f"{what} must be contiguous, got stride {bias.stride()}: "
                         "pass bias.contiguous()")


def check_out_dtype(out_dtype) -> None:
    if out_dtype is not None and out_dtype not in ACT_DTYPES:
        raise ValueError(f"out_dtype must be one of torch.bfloat16, torch.float16, torch.float32 "
                         f"(or None: x's dtype), got {out_dtype!r}")


def _validate(
    x: torch.Tensor, weight: Fp8Weight, act_scale: torch.Tensor | None,
    bias: torch.Tensor | None = None,
) -> None:
    if x.dim() < 1 or x.shape[-1] != weight.k:
        raise ValueError(
            f"x has shape {tuple(x.shape)}: its last dimension must be K={weight.k} "
            f"(the weight is {weight.n}x{weight.k})"
        )
    if x.device != weight.device:
        raise ValueError(f"x is on {x.device} but the weight is on {weight.device}")
    if x.dtype == FP8_DTYPE:
        if weight.scheme is not Scheme.PER_TENSOR or act_scale is None:
            raise ValueError(
                "FP8 activations are accepted by the per_tensor scheme with their act_scale; "
                f"got scheme {weight.scheme} and act_scale={act_scale}"
            )
    elif x.dtype not in ACT_DTYPES:
        raise ValueError(
            f"x has dtype {x.dtype}: expected one of bfloat16, float16, float32 "
            "(or float8_e4m3fn with act_scale for per_tensor)"
        )
    if act_scale is not None:
        if weight.scheme is not Scheme.PER_TENSOR:  # the wording of quantize_weight's
            raise ValueError(f"a static act_scale only applies to per_tensor, not {weight.scheme}")
        if act_scale.numel() != 1:
            raise ValueError(f"act_scale must be one value, got shape {tuple(act_scale.shape)}")
        if act_scale.device.type == "cpu" and _values_checkable(act_scale):
            check_act_scale_range(float(act_scale), "act_scale")  # no GPU sync to read it
    if bias is not None:
        check_bias(bias, weight.n, weight.device)


def fp8_linear(
    x: torch.Tensor,
    weight: Fp8Weight,
    *,
    bias: torch.Tensor | None = None,
    act_scale: torch.Tensor | float | None = None,
    backend: str | Backend = "auto",
    out_dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """y = x @ W.T (+ bias) with W in FP8, for x of shape (..., K); returns (..., N).

    ``act_scale``: the activation scale of FP8 ``x`` (per_tensor), or a static per-tensor
    scale overriding ``weight.act_scale`` (per_tensor only). ``out_dtype``: bfloat16,
    float16 or float32, default x's dtype (bfloat16 for FP8 x). ``bias``: a contiguous
    (N,) floating tensor on the weight's device. A number ``act_scale`` must be finite and
    within formats.ACT_SCALE_MIN..ACT_SCALE_MAX (a Python check, no sync), and so must a
    CPU tensor's; of a GPU tensor only the size is checked (reading it would sync the GPU on
    every call).

    As ``F.linear``: under ``torch.autocast`` a float x is cast to the autocast dtype (so is
    the default output); x on a CUDA device other than the current one runs on its own; a
    gradient flows to x and to the bias (straight through the activation quantization:
    dL/dx = dL/dy @ dequantized W); the FP8 weight and its scales get none (ops.py).
    """
    if not torch.compiler.is_compiling() and backends.other_cuda_device(x):
        with torch.cuda.device(x.device):  # Triton launches on the current device
            return fp8_linear(x, weight, bias=bias, act_scale=act_scale, backend=backend,
                              out_dtype=out_dtype)
    cast = _autocast_dtype(x)
    if cast is not None:
        x = x.to(cast)  # as F.linear under autocast
    if act_scale is not None and not isinstance(act_scale, torch.Tensor):
        act_scale = _act_scale_tensor(act_scale, x.device, _capturing(x))
    _validate(x, weight, act_scale, bias)
    grad = torch.is_grad_enabled() and (
        x.requires_grad or (bias is not None and bias.requires_grad))
    if torch.is_grad_enabled():
        _check_no_scale_grad(weight, act_scale)
    if out_dtype is None:
        out_dtype = torch.bfloat16 if x.dtype == FP8_DTYPE else x.dtype
    else:
        check_out_dtype(out_dtype)
    lead = x.shape[:-1]
    x2 = x.reshape(-1, weight.k)
    if x2.shape[0] == 0:
        y = torch.empty(*lead, weight.n, dtype=out_dtype, device=x.device)
        if grad:  # kept in the graph, as F.linear's: x's gradient (0, K), the bias's zeros
            y = y + (x.sum() * 0).to(out_dtype)
            if bias is not None and bias.requires_grad:
                y = y + (bias.sum() * 0).to(out_dtype)
        return y
    x2 = x2.contiguous()
    if torch.compiler.is_compiling() or grad:
        # compiling: one opaque op in the graph (see ops.py); grad: the op's autograd formula
        if not torch.compiler.is_compiling():
            ops.register(weight)  # the op finds it (and its prepared forms)
        y = ops.fp8_linear_op(
            x2, weight.data, weight.scale, weight.act_scale, act_scale, bias,
            weight.scheme.value, backend.name if isinstance(backend, Backend) else backend,
            out_dtype,
        )
    else:
        ops.register(weight)  # so compiled calls on its tensors reuse its prepared forms
        ops.refresh_if_edited(weight)  # an in-place edit since: its prepared forms are stale
        y = ops.run_2d(x2, weight, bias=bias, act_scale=act_scale, backend=backend,
                   out_dtype=out_dtype)
    return y.reshape(*lead, weight.n)


def _autocast_dtype(x: torch.Tensor) -> torch.dtype | None:
    """The dtype autocast casts a float x to for a linear (None: no autocast on its device)."""
    if x.dtype not in ACT_DTYPES or not _ANY_AUTOCAST():
        return None
    dev = x.device.type
    if not torch.amp.is_autocast_available(dev) or not torch.is_autocast_enabled(dev):
        return None
    return torch.get_autocast_dtype(dev)


def _check_no_scale_grad(weight: Fp8Weight, act_scale: torch.Tensor | None) -> None:
    """The gradient stops at the FP8 weight and its scales: scales that require one (e.g.
    quantize_weight of a weight that requires grad) would silently get none."""
    for what, t in (("weight.scale", weight.scale), ("weight.act_scale", weight.act_scale),
                    ("act_scale", act_scale), ("weight.data", weight.data)):
        if t is not None and t.requires_grad:
            raise ValueError(f"{what} requires grad, but fp8_linear has no gradient for the FP8 "
                             "weight or its scales (only for x and bias): pass it detached, or "
                             "call under torch.no_grad()")


# A number act_scale as a float32 device tensor, made once per (value, device): a per-call
# torch.tensor() is a host-to-device copy, which CUDA graph capture refuses. Never evicted (a
# captured graph keeps their addresses); past _ACT_SCALES_MAX values, new ones get a fresh
# tensor per call (refused under capture).
_ACT_SCALES: dict[tuple[float, torch.device], torch.Tensor] = {}
_ACT_SCALES_MAX = 256


def _act_scale_tensor(act_scale, device: torch.device, capturing: bool) -> torch.Tensor:
    value = float(act_scale)
    check_act_scale_range(value, "act_scale")
    key = (value, device)
    t = _ACT_SCALES.get(key)
    if t is None:
        if capturing:
            raise RuntimeError(
                f"act_scale={act_scale!r} is a number under CUDA graph capture: making its "
                f"tensor on {device} is a host-to-device copy, which capture refuses; pass a "
                "float32 tensor on x's device, or make one eager call with this number first")
        t = torch.tensor(value, dtype=torch.float32, device=device)
        if len(_ACT_SCALES) < _ACT_SCALES_MAX:
            _ACT_SCALES[key] = t
    return t


def _capturing(x: torch.Tensor) -> bool:
    return x.is_cuda and torch.cuda.is_current_stream_capturing()


_IS_CAPTURING = _plan.IS_CAPTURING
# torch.is_autocast_enabled() for any device, one C call
_ANY_AUTOCAST = torch._C._is_any_autocast_enabled
_GRAD_ENABLED = torch._C.is_grad_enabled  # torch.is_grad_enabled(), one C call
_CURRENT_DEVICE = backends.current_device


class _PlanEntry:
    """A cached launch plan and the buffers (and their versions) it was built from."""

    __slots__ = (
        "bias",
        "cuda",
        "eager_only",
        "generation",
        "input_scale",
        "m",
        "pinned",
        "plan",
        "ptrs",
        "run",
        "scale",
        "versioned",
        "versions",
        "weight",
    )

    def __init__(self, plan, m, weight, scale, input_scale, bias, generation, versioned, versions,
                 cuda=False):
        self.plan, self.run, self.m = plan, plan.run, m  # run: one call frame less per call
        self.eager_only = plan.eager_only
        self.cuda = cuda  # its calls may be captured into a CUDA graph
        self.pinned = False  # kept in the module's _pinned (a graph points at it)
        self.weight, self.scale, self.input_scale, self.bias = weight, scale, input_scale, bias
        self.generation, self.versioned, self.versions = generation, versioned, versions
        # `t.data = other` keeps a tensor's identity and version but not its storage: the
        # plan launches on the storage it was built for (addresses, prepared copies)
        self.ptrs = tuple(0 if t is None else t.data_ptr()
                          for t in (weight, scale, input_scale, bias))


# Fp8Weight's scale fields -> Fp8Linear's buffers (their state-dict keys)
_SCALE_KEYS = {"scale": "weight_scale", "act_scale": "input_scale"}


def _squeezed(shape: torch.Size) -> tuple[int, ...]:
    return tuple(d for d in shape if d != 1)


class Fp8Linear(nn.Module):
    """A linear layer with FP8 weights. Buffers (state_dict keys): ``weight`` (N, K) FP8,
    ``weight_scale``, ``input_scale`` (per_tensor with a static scale), ``bias``.

    Casting the module (``.to(torch.bfloat16)``, ``.half()``) moves but never converts the
    FP8 weight and its float32 scales (the bias follows); ``out_dtype`` sets the output's.

    Built empty (weight zeros, scales ones) for ``load_state_dict``; :meth:`from_linear`
    quantizes an ``nn.Linear``, :meth:`from_weight` wraps an :class:`Fp8Weight`. Arguments:
    ``scheme`` (per_tensor, channel_token, block128, weight_only); ``bias``: a bias buffer;
    ``static_input_scale``: an ``input_scale`` buffer (per_tensor only; else x's scale is
    computed per call); ``weight_scale_shape``: the stored scale's shape, one of
    :func:`~fp8tower.formats.expected_weight_scale_shapes` (default its first);
    ``backend``: the GEMM backend (``auto``: the dispatcher's choice per shape);
    ``out_dtype``: the output's dtype (default x's, bf16 for FP8 x); ``device``. The
    ``use_plans`` attribute (default from ``FP8TOWER_PLAN``) turns the per-shape call plans
    off or on."""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        scheme: Scheme | str,
        *,
        bias: bool = False,
        static_input_scale: bool = False,
        weight_scale_shape: tuple[int, ...] | None = None,
        backend: str = "auto",
        out_dtype: torch.dtype | None = None,
        device: torch.device | str | None = None,
    ) -> None:
        super().__init__()
        for name, value in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self.in_features, self.out_features = in_features, out_features
        self.scheme = Scheme.parse(scheme)
        self._plans: dict = {}  # (x shape, dtype, device) -> _PlanEntry (plan.py)
        # What calls under CUDA graph capture ran on: plan entries (their buffers: x's
        # quantized copy and scales, split-K partials) and prepared tensors. A graph keeps
        # their addresses, so they outlive _plans.clear() and refresh().
        self._pinned: list = []
        self._unchecked = False  # scale values not yet checked (after _apply: to_empty)
        self.use_plans = _plan.plans_enabled_default()
        self.backend = backend
        self.out_dtype = out_dtype
        if static_input_scale and self.scheme is not Scheme.PER_TENSOR:
            raise ValueError(f"a static input scale applies to per_tensor only, not {self.scheme}")
        shapes = expected_weight_scale_shapes(self.scheme, out_features, in_features)
        shape = weight_scale_shape if weight_scale_shape is not None else shapes[0]
        if tuple(shape) not in shapes:
            raise ValueError(f"weight_scale_shape {shape} not one of {shapes} for {self.scheme}")
        self.register_buffer(
            "weight", torch.zeros(out_features, in_features, dtype=FP8_DTYPE, device=device)
        )
        self.register_buffer("weight_scale", torch.ones(shape, device=device))
        self.register_buffer("input_scale", torch.ones((), device=device) if static_input_scale else None)
        self.register_buffer("bias", torch.zeros(out_features, device=device) if bias else None)
        self._cached: Fp8Weight | None = None
        # registered now: a compiled forward finds it (ops.py); ones and zeros need no check
        # (nor can they be read on the meta device)
        self.fp8_weight(check_values=False)

    @classmethod
    def from_weight(cls, weight: Fp8Weight, bias: torch.Tensor | None = None, **kw) -> Fp8Linear:
        """An Fp8Linear holding a copy of ``weight`` (its data, scales and static act_scale,
        on its device) and of ``bias``; ``kw``: ``backend``, ``out_dtype``."""
        taken = sorted({"device", "static_input_scale", "weight_scale_shape"} & set(kw))
        if taken:  # else "got multiple values for keyword argument"
            raise ValueError(f"from_weight takes {', '.join(taken)} from the Fp8Weight; move "
                             "the result with .to(device) instead")
        mod = cls(
            weight.k, weight.n, weight.scheme, bias=bias is not None,
            static_input_scale=weight.act_scale is not None,
            weight_scale_shape=tuple(weight.scale.shape), device=weight.device, **kw,
        )
        mod.weight.copy_(weight.data)
        mod.weight_scale.copy_(weight.scale)
        if weight.act_scale is not None:
            mod.input_scale.copy_(weight.act_scale)
        if bias is not None:
            mod.bias = bias.detach().clone()
        return mod

    @classmethod
    def from_linear(
        cls,
        linear: nn.Linear,
        scheme: Scheme | str,
        *,
        act_scale: float | None = None,
        calibration: torch.Tensor | None = None,
        **kw,
    ) -> Fp8Linear:
        """Quantize an nn.Linear. per_tensor: ``act_scale`` (static) or ``calibration``
        inputs (static scale = their amax / 448); neither means a dynamic per-call scale."""
        scheme = Scheme.parse(scheme)
        if calibration is not None:
            if scheme is not Scheme.PER_TENSOR:
                raise ValueError(f"calibration sets a static scale: per_tensor only, not {scheme}")
            if act_scale is not None:
                raise ValueError("give act_scale or calibration, not both")
            if (not isinstance(calibration, torch.Tensor) or not calibration.is_floating_point()
                    or calibration.numel() == 0):
                got = (f"{calibration.dtype} {tuple(calibration.shape)}"
                       if isinstance(calibration, torch.Tensor) else type(calibration).__name__)
                raise ValueError(f"calibration must be a non-empty floating tensor of inputs, "
                                 f"got {got}")
            amax = float(calibration.float().abs().amax())
            if not math.isfinite(amax):
                raise ValueError(f"calibration inputs must be finite, their amax is {amax}")
            act_scale = max(amax / FP8_MAX, MIN_SCALE)  # formats.amax_scale's rule
        if linear.weight.device.type == "meta":
            raise ValueError("from_linear quantizes the linear's weight, which is on the meta "
                             "device: build Fp8Linear(..., device='meta'), then to_empty() and "
                             "load_state_dict, or convert with a checkpoint")
        taken = sorted({"device", "bias", "static_input_scale", "weight_scale_shape"} & set(kw))
        if taken:
            raise ValueError(f"from_linear takes {', '.join(taken)} from the linear and its "
                             "quantized weight; move the result with .to(device) instead")
        w = quantize_weight(linear.weight.detach(), scheme, act_scale=act_scale)
        bias = None if linear.bias is None else linear.bias.detach()
        return cls.from_weight(w, bias, **kw)

    # backend and out_dtype are baked into cached launch plans: setting them drops the plans.
    @property
    def backend(self) -> str:
        return self._backend

    @backend.setter
    def backend(self, value: str | Backend) -> None:
        if not isinstance(value, Backend):  # an unknown name is refused here, not at a forward
            backends.check_name(value)
        self._backend = value
        self._plans.clear()

    @property
    def out_dtype(self) -> torch.dtype | None:
        return self._out_dtype

    @out_dtype.setter
    def out_dtype(self, value: torch.dtype | None) -> None:
        check_out_dtype(value)
        self._out_dtype = value
        self._plans.clear()

    def fp8_weight(self, *, check_values: bool = True) -> Fp8Weight:
        """The buffers as an Fp8Weight; rebuilt (and backends re-prepared) when they move or
        are edited in place (their version counters). Scale values are checked when it is
        built, and after a move or ``to_empty()`` on the first call that checks."""
        if self._unchecked and check_values:
            self._check_scale_values()
        key = (self.weight.data_ptr(), self.weight_scale.data_ptr(), self.weight.device,
               None if self.input_scale is None else self.input_scale.data_ptr(),
               ops.versions(self.weight, self.weight_scale, self.input_scale))
        if self._cached is None or self._cached_key != key:
            ops.forget(self._cached)
            w = Fp8Weight(self.weight, self.weight_scale, self.scheme, self.input_scale,
                          check_values=check_values)
            self._cached = ops.register(w)
            self._cached_key = key
        return self._cached

    def _check_scale_values(self) -> None:
        try:  # built to check the values (shapes and values, as at load), then dropped
            Fp8Weight(self.weight, self.weight_scale, self.scheme, self.input_scale)
        except ValueError as e:
            raise ValueError(f"{self._summary()}: {e} (after to_empty(), load a state_dict "
                             "before the first call)") from None
        self._unchecked = False

    def refresh(self) -> None:
        """Forget the prepared forms and launch plans, and prepare afresh. Edits in place are
        seen without it (version counters) except on tensors made under
        ``torch.inference_mode``, which count no versions, and edits through ``.data``
        (``m.weight_scale.data.mul_(2)``), which bump none: call it after those."""
        self._refresh(check_values=True)

    def _refresh(self, check_values: bool = True) -> None:
        ops.forget(self._cached)
        self._cached = None
        self._plans.clear()
        if check_values:
            self._unchecked = False  # fp8_weight checks them now
        self.fp8_weight(check_values=check_values)

    def __setattr__(self, name, value):
        if name in self._BUFFER_NAMES and isinstance(value, nn.Parameter):
            # e.g. transformers' tie_weights() tying an FP8 lm_head to the embedding: nn.Module
            # would swap the FP8 buffer for the float Parameter (and forward fail on it).
            raise TypeError(
                f"Fp8Linear.{name} is a buffer and cannot be set to a Parameter ({value.dtype} "
                f"{tuple(value.shape)}) in {self._summary()}: an FP8 linear cannot share another "
                "module's float weight, so model.tie_weights() on a converted lm_head is not "
                "supported; keep lm_head unconverted (the default filter) or untie it "
                "(config.tie_word_embeddings=False)"
            )
        if name == "bias" and value is not None:  # kernels read it as contiguous
            value = value.contiguous()
            check_bias(value, self.out_features, self.weight.device, "Fp8Linear.bias")
        if name == "weight" and "weight" in self._buffers:  # replaced after __init__
            want = (self.out_features, self.in_features)
            if (not isinstance(value, torch.Tensor) or value.dtype != FP8_DTYPE
                    or tuple(value.shape) != want):
                got = (f"{value.dtype} {tuple(value.shape)}" if isinstance(value, torch.Tensor)
                       else repr(value))
                raise ValueError(f"Fp8Linear.weight must be {FP8_DTYPE} of shape {want} "
                                 f"(out_features, in_features), got {got}")
        super().__setattr__(name, value)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys,
                              unexpected_keys, error_msgs):
        # Errors go to error_msgs, as torch's own (a size mismatch): the rest of the model
        # still loads and torch raises once, naming every key (2026-12-05 audit: a bad scale
        # raised here named no module and left every later module unloaded).
        for name in self._BUFFER_NAMES:
            t = state_dict.get(prefix + name)
            if not isinstance(t, torch.Tensor):
                continue
            if name == "weight" and t.dtype != FP8_DTYPE:
                error_msgs.append(f"state_dict key {prefix}weight has dtype {t.dtype}: expected "
                                  f"{FP8_DTYPE} codes (quantize a float weight with "
                                  "Fp8Linear.from_linear or formats.quantize_weight)")
                return
            if name != "weight" and not t.is_floating_point():
                error_msgs.append(f"state_dict key {prefix}{name} has dtype {t.dtype}: expected "
                                  "a floating dtype (scales are stored as float32)")
                return
            buf = self._buffers.get(name)
            if (name in ("weight_scale", "input_scale") and buf is not None
                    and t.shape != buf.shape and _squeezed(t.shape) == _squeezed(buf.shape)):
                # the same values in a checkpoint's shape: compressed-tensors' (N, 1) channel
                # scales, a (1,) scalar (torch's own check said only "size mismatch")
                state_dict[prefix + name] = t.reshape(buf.shape)
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys,
                                      unexpected_keys, error_msgs)
        for name in ("weight_scale", "input_scale"):  # assign=True keeps the given tensors
            t = self._buffers.get(name)
            if t is not None and t.dtype != torch.float32:
                self._buffers[name] = t.float()
        scales = [prefix + n for n, t in (("weight_scale", self.weight_scale),
                                          ("input_scale", self.input_scale)) if t is not None]
        if all(k in state_dict for k in scales):
            try:
                self._refresh()  # loaded values may differ: re-prepare (and check the scales)
            except ValueError as e:
                # named by its state-dict key, as the dtype errors above: a ScaleError's
                # Fp8Weight field -> our buffer (an unknown field as it is); else the module
                if isinstance(e, ScaleError):
                    where = f"state_dict key {prefix}{_SCALE_KEYS.get(e.field, e.field)}"
                else:
                    where = f"{self._summary()} (state_dict prefix {prefix!r})"
                error_msgs.append(f"{where}: {e}")
                self._unchecked = True  # a forward checks them again (and refuses)
                self._refresh(check_values=False)
        else:  # a shard without the scales (after to_empty: their memory may hold anything):
            self._unchecked = True  # checked at the first forward, as after _apply
            self._refresh(check_values=False)

    _KEEP_DTYPE = ("weight", "weight_scale", "input_scale")
    _BUFFER_NAMES = (*_KEEP_DTYPE, "bias")

    def _apply(self, fn, recurse=True):
        # A dtype cast of the model (.to(torch.bfloat16), .half()) must not turn the FP8
        # weight into bf16 nor round its float32 scales: keep their dtypes, follow the device.
        kept = {n: self._buffers[n] for n in self._KEEP_DTYPE if self._buffers.get(n) is not None}
        out = super()._apply(fn, recurse)
        for name, orig in kept.items():
            new = self._buffers[name]
            if new.dtype != orig.dtype:
                self._buffers[name] = orig.to(new.device)
        # .to() / .cuda() / to_empty() replaced the buffers. to_empty() leaves them
        # uninitialized (meta -> to_empty -> load_state_dict is the usual way to build a big
        # model): their values are checked at load or at the first call, not here.
        self._unchecked = True
        self._refresh(check_values=False)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.use_plans and not torch.compiler.is_compiling():
            # The eager hot path: a cached launch plan for this input (plan.py). First, what
            # a plan does not serve: in grad mode, a tensor that wants a gradient (x or the
            # bias: the op's formula; the weight or a scale: refused), autocast, x on another
            # CUDA device than the current one (one C call each, attribute reads).
            b = self._buffers
            bias, w, s, i = b["bias"], b["weight"], b["weight_scale"], b["input_scale"]
            if (_GRAD_ENABLED() and (
                    x.requires_grad or w.requires_grad or s.requires_grad
                    or (bias is not None and bias.requires_grad)
                    or (i is not None and i.requires_grad))) or _ANY_AUTOCAST() or (
                    x.is_cuda and x.get_device() != _CURRENT_DEVICE()):
                y, x = self._forward_special(x)
                if y is not None:
                    return y
            e = self._plans.get((x.shape, x.dtype, x.device))
            if e is not None:
                p = e.ptrs
                if (e.weight is w and e.scale is s and e.input_scale is i and e.bias is bias
                        and e.generation == dispatch._generation
                        and (not e.versioned or e.versions == (
                            w._version, s._version, -1 if i is None else i._version))
                        and w.data_ptr() == p[0] and s.data_ptr() == p[1]
                        and (i is None or i.data_ptr() == p[2])
                        and (bias is None or bias.data_ptr() == p[3])
                        and x.is_contiguous()):
                    if e.cuda and _IS_CAPTURING():
                        return self._forward_captured(x, e)
                    return e.run(x)  # y in x's leading shape (plan.py: no views)
            return self._forward_planned(x)
        return self._forward_unplanned(x)

    def _forward_special(self, x: torch.Tensor):
        """(y, x) for a call the hot path does not serve as it is, or (None, x) to go on with
        it: autocast (x cast as F.linear casts it), a gradient for x or the bias (the custom
        op's formula), x on a CUDA device that is not the current one (Triton launches on the
        current one)."""
        cast = _autocast_dtype(x)
        if cast is not None:
            # no autocast inside: the reference backend's float32 matmul would follow it
            with torch.autocast(x.device.type, enabled=False):
                return self.forward(x.to(cast)), x
        bias = self._buffers["bias"]
        if torch.is_grad_enabled():
            # a scale that wants a gradient is refused, as fp8_linear refuses it (2026-12-05
            # audit: the plan ran, and the reference backend's torch ops gave it one)
            for name in ("weight", "weight_scale", "input_scale"):
                t = self._buffers[name]
                if t is not None and t.requires_grad:
                    raise ValueError(f"{self._summary()}: {name} requires grad, but there is no "
                                     "gradient for the FP8 weight or its scales (only for x "
                                     "and the bias): call requires_grad_(False) on it, or run "
                                     "under torch.no_grad()")
        if (x.requires_grad or (bias is not None and bias.requires_grad)) \
                and torch.is_grad_enabled():  # a bias alone may train (BitFit)
            return self._forward_unplanned(x), x
        if x.is_cuda and x.get_device() != _CURRENT_DEVICE():
            with torch.cuda.device(x.device):
                return self.forward(x), x
        return None, x

    def _forward_captured(self, x: torch.Tensor, e: _PlanEntry) -> torch.Tensor:
        """A call with a plan under CUDA graph capture: the plan, or where it is eager-only
        the plan of the graph's choice (plan.py's module doc)."""
        run = e.run
        if e.eager_only:
            if e.plan.graph is None:
                return self._forward_unplanned(x)  # a graph runs the dispatch choice
            run = e.plan.graph.run
        if not e.pinned:  # the graph keeps the plan's buffers' addresses: keep the buffers
            e.pinned = True
            self._pinned.append(e)
        return run(x)

    def _forward_planned(self, x: torch.Tensor) -> torch.Tensor:
        """Build this input's plan (where one applies) and run it; else the unplanned path."""
        m = x.numel() // max(self.in_features, 1) if x.dim() else 0
        if not _plan.plannable(x, m, self.in_features, self.weight.device):
            return self._forward_unplanned(x)
        weight = self.fp8_weight()
        x2 = x.view(m, self.in_features)
        _validate(x2, weight, None, self._buffers["bias"])
        out_dtype = self.out_dtype if self.out_dtype is not None else x.dtype
        b = self._buffers
        if len(self._plans) >= _plan.MAX_PLANS_PER_MODULE:
            self._plans.clear()
        p = _plan.build(x, weight, bias=b["bias"], out_dtype=out_dtype, backend=self.backend)
        tensors = (b["weight"], b["weight_scale"], b["input_scale"])
        versioned = not any(t is not None and t.is_inference() for t in tensors)
        self._plans[(x.shape, x.dtype, x.device)] = _PlanEntry(
            p, m, *tensors, b["bias"], dispatch._generation, versioned,
            ops.versions(*tensors) if versioned else None, x.is_cuda)
        if p.warm is not None:
            # Compile (and load) the graph's choice now, eagerly: captured calls will run it,
            # and a kernel cannot be compiled during a capture.
            p.warm(x)
        return p(x)

    def _forward_unplanned(self, x: torch.Tensor) -> torch.Tensor:
        act = None
        if x.dtype == FP8_DTYPE:  # quantized by the caller with the module's static scale
            if self.input_scale is None:
                raise ValueError(f"FP8 x needs the module's static input_scale (per_tensor); "
                                 f"{self._summary()} has none: pass bfloat16 / float16 / "
                                 "float32 x")
            act = self.input_scale
        if torch.compiler.is_compiling():
            # No fp8_weight() here: data_ptr() cannot be traced. This Fp8Weight only carries
            # the buffers to the op, which finds the registered one (ops.weight_for).
            weight = Fp8Weight(self.weight, self.weight_scale, self.scheme, self.input_scale,
                               check_values=False)
        else:
            weight = self.fp8_weight()
            if x.is_cuda and _IS_CAPTURING():
                y = fp8_linear(x, weight, bias=self.bias, act_scale=act, backend=self.backend,
                               out_dtype=self.out_dtype)
                self._pin_prepared(weight)
                return y
        return fp8_linear(x, weight, bias=self.bias, act_scale=act, backend=self.backend,
                          out_dtype=self.out_dtype)

    def _pin_prepared(self, weight: Fp8Weight) -> None:
        """After a captured unplanned call: keep the backends' prepared forms its kernels
        point at (packed weights, kernel scales, split-K counters) past refresh() and a
        counters buffer grown later."""
        todo = list(weight.packed.values())
        while todo:
            item = todo.pop()
            if isinstance(item, torch.Tensor):
                if not any(t is item for t in self._pinned):
                    self._pinned.append(item)
            elif isinstance(item, dict):
                todo.extend(item.values())
            elif isinstance(item, (list, tuple)):
                todo.extend(item)

    def __getstate__(self):
        # Plans hold compiled kernels and device buffers: a copy (deepcopy, pickle) rebuilds them.
        state = super().__getstate__() if hasattr(super(), "__getstate__") else self.__dict__.copy()
        state = dict(state)
        state["_plans"] = {}
        state["_pinned"] = []  # a copy's calls were never captured
        return state

    def __setstate__(self, state):
        state.setdefault("_pinned", [])  # pickled before these existed
        state.setdefault("_unchecked", False)
        super().__setstate__(state)

    def _summary(self) -> str:
        return (f"Fp8Linear(in_features={self.in_features}, out_features={self.out_features}, "
                f"scheme={self.scheme.value})")

    def extra_repr(self) -> str:
        # per_tensor says how x is scaled: a dynamic scale couples the rows of a call
        act = ("" if self.scheme is not Scheme.PER_TENSOR else
               f", input_scale={'static' if self.input_scale is not None else 'dynamic'}")
        out = "" if self.out_dtype is None else f", out_dtype={self.out_dtype}"
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"scheme={self.scheme.value}{act}, backend={self.backend}, "
            f"bias={self.bias is not None}{out}"
        )
