"""fp8tower: fast FP8 linear layers for LLM decode, and paired-trace attribution.

Importing this package touches no CUDA and imports no optional package (triton,
matplotlib, jinja2): those load lazily where they are used.
"""

__version__ = "0.1.0"

_EXPORTS = {
    "Fp8Linear": "linear",
    "fp8_linear": "linear",
    "Fp8Weight": "formats",
    "Scheme": "formats",
    "quantize_weight": "formats",
    "GemmProblem": "problem",
    "convert": "convert",
    "from_pretrained": "convert",
}
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
]


def __getattr__(name):
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    raise AttributeError(f"module 'fp8tower' has no attribute {name!r}")
