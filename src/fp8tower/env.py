"""fp8tower's on/off environment variables (FP8TOWER_TUNE, FP8TOWER_RETUNE, FP8TOWER_PLAN,
FP8TOWER_TILE_MAJOR, FP8TOWER_EAGER_ONE_LAUNCH, FP8TOWER_EARLY_LAUNCH), read one way: a word
it does not know is an error naming the variable, never its default (``disabled`` once
turned tuning on)."""

from __future__ import annotations

import os

_ON = ("1", "true", "yes", "on")
_OFF = ("0", "false", "no", "off")


def flag(name: str, default: bool) -> bool:
    """1/true/yes/on or 0/false/no/off, any case; unset or empty: ``default``."""
    raw = os.environ.get(name, "")
    value = raw.strip().lower()
    if not value:
        return default
    if value in _ON:
        return True
    if value in _OFF:
        return False
    raise ValueError(f"{name}={raw!r}: expected one of {', '.join(_ON)} (on) or "
                     f"{', '.join(_OFF)} (off)")
