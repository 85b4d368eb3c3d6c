"""Backend registry.

A backend is a module exposing ``BACKEND``, a frozen :class:`Backend` descriptor (its
contract: :class:`Backend`'s docstring). Modules load lazily on first use of the registry, so
``import fp8tower`` imports no optional package; a module whose optional dependency is
missing (ImportError) simply does not register.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..formats import Fp8Weight
from ..problem import GemmProblem

# torch.cuda.current_device() without its Python frame and lazy-init check (CPU builds may
# lack _cuda_getDevice: their fallback is only called for CUDA tensors, which they cannot have)
current_device = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device


def other_cuda_device(x: torch.Tensor) -> bool:
    """x is on a CUDA device that is not the current one. Kernel launches (Triton's, the
    C libraries' cudaFuncSetAttribute) act on the current device and its stream
    (Liger-Kernel issue #1303 is this bug): such a call must run under
    ``torch.cuda.device(x.device)``."""
    return x.is_cuda and x.get_device() != current_device()


# In the order `auto` tries them when nothing is tuned (fastest first, oracle last); cudnn
# cutlass and stream after cublaslt, so the untuned safe default stays cuBLASLt (only the tuner
# picks them).
_MODULES = ("triton_gemm", "cublaslt", "cudnn", "cutlass", "stream", "reference")
# Optional packages whose absence makes a backend module not register.
_OPTIONAL = {"triton"}


@dataclass(frozen=True)
class Backend:
    """One GEMM backend: the contract every backend module's ``BACKEND`` fulfils.

    - ``kernel_family``: regex matching the names of every kernel the backend launches for
      one call, so a trace can confirm it ran.
    - ``unavailable_reason()``: None when usable on this machine, else why not.
    - ``check(problem)``: None when it can serve the problem, else why not.
    - ``prepare(weight)``: backend-specific packed form, done once per weight.
    - ``run(x, weight, packed, *, act_scale, bias, out_dtype, config, out=None)``: y (M, N),
      written into ``out`` when given.
    - ``configs(problem)``: kernel configs the tuner may try (empty: not tunable).
    - ``priority_configs(problem)``: configs (from ``configs``) the tuner times before its
      evenly spaced sample of the rest.
    - ``refinements(problem, config)``: configs next to ``config`` that its measurement
      makes worth timing (Triton: its K steps all in flight, its PDL twin); the tuner times
      them for its winner only.
    - ``layout_variants(problem, config)``: the same kernel config over another weight
      layout (Triton: tile-major); the tuner times them for its winner only.
    - ``precompile(jobs)``: optional; build the kernels of [(problem, config), ...] ahead of
      tuning (in parallel); returns a report with ``summary()`` and ``failures``.
    - ``untuned_defers_to(problem, gpu)`` / ``untuned_config(problem, gpu)``: what the
      dispatcher's safe default serves untuned on that GPU instead of this backend's
      ``default_config`` (another backend's name / another config), where measured faster.
    """

    name: str
    kernel_family: str
    description: str
    unavailable_reason: Callable[[], str | None]
    check: Callable[[GemmProblem], str | None]
    prepare: Callable[[Fp8Weight], Any]
    run: Callable[..., torch.Tensor]
    configs: Callable[[GemmProblem], list] = field(default=lambda problem: [])
    default_config: Callable[[GemmProblem], Any] = field(default=lambda problem: None)
    priority_configs: Callable[[GemmProblem], list] = field(default=lambda problem: [])
    refinements: Callable[[GemmProblem, Any], list] = field(default=lambda problem, config: [])
    layout_variants: Callable[[GemmProblem, Any], list] = field(default=lambda problem, config: [])
    precompile: Callable[[list], Any] | None = None
    # The name of a backend that serves the problem faster when nothing is tuned, or None
    # (dispatch's safe default follows it when that backend can serve). Called with the
    # problem and the GPU's name (dispatch.UNTUNED_RULE_GPUS; None for a CPU problem).
    untuned_defers_to: Callable[[GemmProblem, str | None], str | None] = field(
        default=lambda problem, gpu=None: None)
    # The config it serves the problem with when nothing is tuned, on the GPU named (as
    # above); None: ``default_config``. Triton: the H100 SXM's own small-M default.
    untuned_config: Callable[[GemmProblem, str | None], Any] | None = None

    def is_available(self) -> bool:
        return self.unavailable_reason() is None

    def kernel_regex(self) -> re.Pattern:
        return re.compile(self.kernel_family)

    def packed_for(self, weight: Fp8Weight) -> Any:
        """The prepared weight, prepared once and cached on the weight."""
        if self.name not in weight.packed:
            weight.packed[self.name] = self.prepare(weight)
        return weight.packed[self.name]


class BackendError(ValueError):
    """An explicitly requested backend does not exist or cannot serve a problem."""


_REGISTRY: dict[str, Backend] | None = None


def _load() -> dict[str, Backend]:
    global _REGISTRY
    if _REGISTRY is None:
        reg: dict[str, Backend] = {}
        for mod in _MODULES:
            try:
                module = importlib.import_module(f"{__name__}.{mod}")
            except ModuleNotFoundError as e:
                if e.name not in _OPTIONAL:
                    raise
                continue  # an optional backend whose package is not installed
            reg[module.BACKEND.name] = module.BACKEND
        _REGISTRY = reg
    return _REGISTRY


def names() -> list[str]:
    """Registered backend names, in `auto`'s fallback order."""
    return list(_load())


def all_backends() -> list[Backend]:
    return list(_load().values())


def available() -> list[Backend]:
    return [b for b in _load().values() if b.is_available()]


def get(name: str) -> Backend:
    reg = _load()
    if name not in reg:
        raise BackendError(f"unknown backend {name!r}: registered backends are {', '.join(reg)}")
    return reg[name]


def check_name(name: str) -> None:
    """Refuse a backend name that is neither ``auto`` nor registered (what fp8_linear and
    Fp8Linear take); ``auto`` loads no backend module."""
    if name != "auto" and name not in _load():
        raise BackendError(f"unknown backend {name!r}: expected auto or one of "
                           f"{', '.join(_load())}")


def require(name: str, problem: GemmProblem) -> Backend:
    """The named backend, or a BackendError saying why it cannot serve ``problem``."""
    backend = get(name)
    reason = backend.unavailable_reason() or backend.check(problem)
    if reason is not None:
        raise BackendError(
            f"backend {name!r} cannot serve {problem.key()}: {reason} "
            f"(registered backends: {', '.join(names())}; use backend='auto' to pick one)"
        )
    return backend


def first_able(problem: GemmProblem) -> Backend:
    """The first registered backend (fallback order) able to serve ``problem``."""
    reasons = []
    for backend in _load().values():
        reason = backend.unavailable_reason() or backend.check(problem)
        if reason is None:
            return backend
        reasons.append(f"{backend.name}: {reason}")
    raise BackendError(f"no backend can serve {problem.key()}: " + "; ".join(reasons))
