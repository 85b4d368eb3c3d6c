"""fp8tower's on/off environment variables (FP8TOWER_TUNE, FP8TOWER_RETUNE, FP8TOWER_PLAN,
FP8TOWER_TILE_MAJOR, FP8TOWER_EAGER_ONE_LAUNCH, FP8TOWER_EARLY_LAUNCH, FP8TOWER_HOST_TIE),
read one way: a word it does not know is an error naming the variable, never its default
(``disabled`` once turned tuning on)."""

from __future__ import annotations

import difflib
import logging
import os
import warnings

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
         "FP8TOWER_EAGER_ONE_LAUNCH", "FP8TOWER_EARLY_LAUNCH", "FP8TOWER_HOST_TIE")


#: every FP8TOWER_* variable fp8tower or its tests read; another one set is a misspelling
#: (FP8TOWER_RETUEN=1 passed silently), warned by :func:`check_flags`
USER_KNOWN = (*FLAGS, "FP8TOWER_CACHE_DIR", "FP8TOWER_BACKENDS", "FP8TOWER_LOG")
KNOWN = (*USER_KNOWN, "FP8TOWER_REQUIRE_BROWSER", "FP8TOWER_FUZZ_EXAMPLES")  # + the tests' own
_LEVELS = ("debug", "info", "warning", "error")
#: the backends FP8TOWER_BACKENDS may name (backends/__init__.py registers them, less those
#: whose package is missing; tests/test_cli_audit5.py pins the two lists together): checked
#: here without importing torch
BACKEND_NAMES = ("triton", "cublaslt", "cudnn", "cutlass", "stream", "reference")
_warned: set[str] = set()


def check_flags() -> None:
    """Raise ValueError naming the first of :data:`FLAGS` set to a word :func:`flag` does
    not know, an FP8TOWER_BACKENDS naming no known backend, or a bad FP8TOWER_LOG; warn once
    about an FP8TOWER_* name fp8tower does not read (with the known name it is closest to);
    apply FP8TOWER_LOG."""
    for name in FLAGS:
        flag(name, False)
    raw = os.environ.get("FP8TOWER_BACKENDS", "")
    if raw.strip():  # a bad name was a traceback after the model's build (2026-12-05 audit)
        names = [n.strip() for n in raw.split(",") if n.strip()]
        unknown = [n for n in names if n not in BACKEND_NAMES]
        if unknown or not names:
            what = f"unknown backend(s) {', '.join(unknown)}" if unknown else "names no backend"
            raise ValueError(f"FP8TOWER_BACKENDS={raw!r}: {what}; expected a comma list of "
                             f"{', '.join(BACKEND_NAMES)} (or leave it unset)")
    for name in sorted(os.environ):
        if name.startswith("FP8TOWER_") and name not in KNOWN and name not in _warned:
            _warned.add(name)
            close = difflib.get_close_matches(name, KNOWN, n=1)
            warnings.warn(f"{name} is not a variable fp8tower reads"
                          + (f" (did you mean {close[0]}?)" if close else
                             f"; known: {', '.join(USER_KNOWN)}"), RuntimeWarning, stacklevel=3)
    setup_logging()


def setup_logging() -> None:
    """FP8TOWER_LOG=info (or debug, warning, error): fp8tower's log lines on stderr, e.g.
    each key ``auto`` tunes, with its winner and margin (otherwise a tuning stall inside a
    model's first call printed nothing)."""
    raw = os.environ.get("FP8TOWER_LOG", "").strip().lower()
    if not raw:
        return
    if raw not in _LEVELS:
        raise ValueError(f"FP8TOWER_LOG={raw!r}: expected one of {', '.join(_LEVELS)}")
    log = logging.getLogger("fp8tower")
    log.setLevel(raw.upper())
    if not any(getattr(h, "fp8tower", False) for h in log.handlers):
        handler = logging.StreamHandler()
        handler.fp8tower = True
        handler.setFormatter(logging.Formatter("fp8tower: %(message)s"))
        log.addHandler(handler)
