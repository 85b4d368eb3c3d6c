"""Problem -> (backend, kernel config).

An explicit backend name bypasses tuning (and raises with the reason if it cannot serve).
``auto`` takes the first registered backend able to serve the problem; the tuned dispatch
(cache hit, else tune, else a safe default) plugs in here.
"""

from __future__ import annotations

from typing import Any

from . import backends
from .backends import Backend
from .problem import GemmProblem


def resolve(problem: GemmProblem, backend: str | Backend = "auto") -> tuple[Backend, Any]:
    """The backend and kernel config that will serve ``problem``."""
    if isinstance(backend, Backend):
        backend = backend.name
    if backend != "auto":
        b = backends.require(backend, problem)
        return b, b.default_config(problem)
    b = backends.first_able(problem)
    return b, b.default_config(problem)
