"""transformers, imported where a model is built, with the install that provides it named."""

from __future__ import annotations

MIN_TRANSFORMERS = "5.17"


def transformers():
    """The transformers module; without it, a ModuleNotFoundError that names the extra (a
    packaging audit, 2026-12-05: `from_pretrained` gave a bare traceback, and `bench generate`
    blamed transformers for any ImportError, one of its own dependencies included); older
    than MIN_TRANSFORMERS, an ImportError that names it (``name="transformers"`` both)."""
    try:
        import transformers
    except ModuleNotFoundError as e:
        if e.name != "transformers":
            raise
        raise ModuleNotFoundError(
            f"this needs transformers >= {MIN_TRANSFORMERS}: pip install 'fp8tower[hf]'",
            name="transformers") from None
    _check_version(transformers.__version__)
    return transformers


def _check_version(version: str) -> None:
    """An older transformers is refused in one line: the floor sits only in the ``hf``
    extra, so ``pip install fp8tower`` keeps an old one, and 4.57 refused a Qwen3.5
    checkpoint with a 4.7 kB list of every model type it knows (2026-12-06 audit). A
    version that does not start with numbers is not refused on a guess."""
    from ..provenance import release

    got = release(version)
    if got and got < release(MIN_TRANSFORMERS):
        raise ImportError(f"transformers {version} is older than fp8tower needs (>= "
                          f"{MIN_TRANSFORMERS}): pip install -U 'fp8tower[hf]'",
                          name="transformers")
