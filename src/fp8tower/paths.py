"""Where fp8tower keeps what it builds and measures on this machine (tuning caches, the CUTLASS and
stream libraries): one rule for every module, whatever its layer."""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from .env import flag


def cache_dir() -> Path:
    """FP8TOWER_CACHE_DIR, else $XDG_CACHE_HOME/fp8tower, else ~/.cache/fp8tower (a relative
    XDG_CACHE_HOME is ignored, as the XDG spec says)."""
    env = os.environ.get("FP8TOWER_CACHE_DIR")
    if env:  # absolute: a relative one must not move with the working directory
        return Path(env).expanduser().absolute()
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg).expanduser() if xdg and Path(xdg).expanduser().is_absolute() else None
    return (base or Path("~/.cache").expanduser()) / "fp8tower"


def umask_mode(base: int = 0o666) -> int:
    """``base`` less the process's umask: the mode ``open()`` would give a new file. Files
    written through ``tempfile.mkstemp`` (then renamed into place) are 0600 whatever the
    umask, so a cache folder shared by a team became unreadable to all but its last writer."""
    return base & ~_umask()


def _umask() -> int:
    """The process's umask, read from /proc on Linux (os.umask can only read it by setting
    it, which gives other threads' new files a wider mode meanwhile), else that way."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o077)  # the narrowest mask while it is read
    os.umask(mask)
    return mask


def cache_file_name(device_name: str) -> str:
    """The tuning cache file of a GPU, in :func:`cache_dir`: 'NVIDIA H200' -> 'nvidia-h200.json';
    with FP8TOWER_EARLY_LAUNCH=0, 'nvidia-h200-no-early-launch.json': timings taken without early
    launch differ (the cache's metadata records the state), and a run with the switch off must
    neither read nor overwrite the default file's choices."""
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-") or "unknown"
    if re.search(r"[^A-Za-z0-9 ]", device_name):  # names that would slug alike ('H100-80GB'
        # and 'H100 80GB', every non-ASCII name: 'unknown') keep files apart: each save
        # replaced the other GPU's file
        slug += "-" + hashlib.sha256(device_name.encode()).hexdigest()[:8]
    return f"{slug}.json" if flag("FP8TOWER_EARLY_LAUNCH", True) else f"{slug}-no-early-launch.json"
