"""fp8tower: fast FP8 linear layers for LLM decode, and paired-trace attribution.

Importing this package touches no CUDA and imports nothing but the standard library: the
exports below and the subpackages (``fp8tower.backends``, ``fp8tower.trace``, ...) load on
first attribute access; optional packages (triton, matplotlib, jinja2) load where used.
"""

__version__ = "0.1.0"

_EXPORTS = {
    "Fp8Linear": "nn.linear",
    "fp8_linear": "nn.linear",
    "Fp8Weight": "formats",
    "Scheme": "formats",
    "quantize_weight": "formats",
    "GemmProblem": "problem",
    "convert": "hf.conversion",
    "from_pretrained": "hf.pretrained",
    "save_pretrained": "hf.save",
}
# Submodules reachable as attributes without importing them first (fp8tower.backends...).
_SUBMODULES = frozenset({
    "backends", "checkpoint", "cli", "dispatch", "formats", "hf", "kernels", "models", "nn",
    "problem",
    "provenance", "tower", "trace", "tuning",
})
__all__ = [
    "Fp8Linear",
    "Fp8Weight",
    "GemmProblem",
    "Scheme",
    "__version__",
    "convert",
    "fp8_linear",
    "from_pretrained",
    "quantize_weight",
    "save_pretrained",
]


def __getattr__(name):
    import importlib

    if name in _EXPORTS:
        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)  # binds it as an attribute too
    raise AttributeError(f"module 'fp8tower' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_EXPORTS, *_SUBMODULES})
