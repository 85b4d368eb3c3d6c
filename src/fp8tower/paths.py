"""Where fp8tower keeps what it builds and measures on this machine (tuning caches, the CUTLASS and
stream libraries): one rule for every module, whatever its layer."""

from __future__ import annotations

import os
import re
from pathlib import Path

from .env import flag


def cache_dir() -> Path:
    """FP8TOWER_CACHE_DIR, else $XDG_CACHE_HOME/fp8tower, else ~/.cache/fp8tower."""
    env = os.environ.get("FP8TOWER_CACHE_DIR")
    if env:  # absolute: a relative one must not move with the working directory
        return Path(env).expanduser().absolute()
    return Path(os.environ.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "fp8tower"


def cache_file_name(device_name: str) -> str:
    """The tuning cache file of a GPU, in :func:`cache_dir`: 'NVIDIA H200' -> 'nvidia-h200.json';
    with FP8TOWER_EARLY_LAUNCH=0, 'nvidia-h200-no-early-launch.json': timings taken without early
    launch differ (the cache's metadata records the state), and a run with the switch off must
    neither read nor overwrite the default file's choices."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "unknown"
    return f"{slug}.json" if flag("FP8TOWER_EARLY_LAUNCH", True) else f"{slug}-no-early-launch.json"
