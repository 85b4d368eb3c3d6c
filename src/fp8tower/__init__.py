"""fp8tower: fast FP8 linear layers for LLM decode, and paired-trace attribution.

Importing this package touches no CUDA and imports no optional package (triton,
matplotlib, jinja2): those load lazily where they are used.
"""

__version__ = "0.1.0"
