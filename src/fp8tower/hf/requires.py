"""transformers, imported where a model is built, with the install that provides it named."""

from __future__ import annotations

MIN_TRANSFORMERS = "5.17"


def transformers():
    """The transformers module; without it, a ModuleNotFoundError that names the extra (a
    packaging audit, 2026-12-05: `from_pretrained` gave a bare traceback, and `bench generate`
    blamed transformers for any ImportError, one of its own dependencies included)."""
    try:
        import transformers
    except ModuleNotFoundError as e:
        if e.name != "transformers":
            raise
        raise ModuleNotFoundError(
            f"this needs transformers >= {MIN_TRANSFORMERS}: pip install 'fp8tower[hf]'",
            name="transformers") from None
    return transformers
