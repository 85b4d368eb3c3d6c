"""Where fp8tower keeps what it builds and measures on this machine (tuning caches, the CUTLASS and
stream libraries): one rule for every module, whatever its layer."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """FP8TOWER_CACHE_DIR, else $XDG_CACHE_HOME/fp8tower, else ~/.cache/fp8tower."""
    env = os.environ.get("FP8TOWER_CACHE_DIR")
    if env:  # absolute: a relative one must not move with the working directory
        return Path(env).expanduser().absolute()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "fp8tower"
