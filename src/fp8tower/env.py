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


#: every on/off variable; :func:`check_flags` reads them all where the dispatcher is made, so
#: a bad word is an error there even for one only a GPU path reads (on a CPU
#: FP8TOWER_TILE_MAJOR=x and FP8TOWER_EAGER_ONE_LAUNCH=x passed silently)
FLAGS = ("FP8TOWER_TUNE", "FP8TOWER_RETUNE", "FP8TOWER_PLAN", "FP8TOWER_TILE_MAJOR",
         "FP8TOWER_EAGER_ONE_LAUNCH", "FP8TOWER_EARLY_LAUNCH")


def check_flags() -> None:
    """Raise ValueError naming the first of :data:`FLAGS` set to a word :func:`flag` does
    not know."""
    for name in FLAGS:
        flag(name, False)
