"""nvcc, for the backends that build their own CUDA libraries (cutlass, stream): where it is,
its version, and one cached, locked, atomic build of a shared library with a sidecar JSON
(build time and command). A library is loaded with ctypes and called with raw device
pointers, so nothing here needs a GPU or a CUDA torch: sm_90a builds run on any machine
with nvcc, and a library built on one machine serves another with the same nvcc."""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from ..paths import umask_mode


def nvcc_path() -> str | None:
    """nvcc on PATH, else $CUDA_HOME/bin/nvcc, else None."""
    found = shutil.which("nvcc")
    if found:
        return found
    home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if home and (Path(home) / "bin" / "nvcc").is_file():
        return str(Path(home) / "bin" / "nvcc")
    return None


@functools.cache
def nvcc_version(nvcc: str) -> str:
    """'release 13.0, V13.0.88' from ``nvcc --version``."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release [^\n]*", out)
    return m.group(0).strip() if m else out.strip().splitlines()[-1]


# nvcc reads these from the environment and adds them to every command line: a build made
# under them differs, so they are part of every cache key (nvcc_env_key).
NVCC_ENV_FLAGS = ("NVCC_PREPEND_FLAGS", "NVCC_APPEND_FLAGS")


def nvcc_env_key() -> str:
    """The environment's extra nvcc flags, for a build's cache key."""
    return "\0".join(f"{v}={os.environ.get(v, '')}" for v in NVCC_ENV_FLAGS)


def sm90a_unavailable(build_reason: str | None) -> str | None:
    """Why a backend of sm_90a libraries cannot run here: ``build_reason`` (no nvcc, no
    headers), no CUDA GPU, or a GPU other than sm_90; None when it can."""
    if build_reason is not None:
        return build_reason
    import torch

    if not torch.cuda.is_available():
        return "needs a CUDA GPU (the kernels are sm_90a)"
    cap = torch.cuda.get_device_capability()
    if cap != (9, 0):
        return f"built for sm_90a (Hopper) only, this GPU is sm_{cap[0]}{cap[1]}"
    return None


# Peak resident memory of one CUTLASS library build (cicc): 3.6 GB for pf_64x16x128 under
# nvcc 13.0.88 and CUTLASS 4.2.0 (/usr/bin/time -v, 2026-12-05); rounded up.
BUILD_PEAK_BYTES = 4 << 30


def _available_memory() -> int | None:
    """MemAvailable of /proc/meminfo in bytes; None where there is none (not Linux)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def build_workers(todo: int) -> int:
    """How many nvcc builds to run at once for ``todo`` libraries: one per CPU this process
    may use (nvcc's cicc is single-threaded: one build a core), no more than the available
    memory holds at BUILD_PEAK_BYTES each; at least 1. It was half the CPUs: a cold tune on
    the H200's 16-core host spent 62 of its 88 s in these builds
    (results/audit2_H200_2026-12-05/call5/tune.log)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count() or 1
    limit = min(todo, cpus)
    mem = _available_memory()
    if mem is not None:
        limit = min(limit, mem // BUILD_PEAK_BYTES)
    return max(1, limit)


def build_library(path: Path, command: Callable[..., list[str]], error: type[Exception],
                  what: str, meta: dict, source: tuple[str, str] | None = None) -> Path:
    """``path``, compiled first when missing by ``command(tmp_out)`` (atomic; one process at a
    time per library, under a file lock). A failed build raises ``error`` naming ``what``.

    ``source`` = (file name, text): the text ``path``'s key was hashed from, written to a
    temporary file that nvcc compiles (``command(tmp_out, tmp_source)``): nvcc reading the
    source file itself, later, could build an edit made in between under the old key. ptxas
    lines (``-Xptxas -v``) go to the sidecar JSON, with the environment's extra nvcc flags."""
    if path.is_file():
        return path
    from filelock import FileLock

    path.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(path) + ".lock"), tempfile.TemporaryDirectory(dir=path.parent) as work:
        if path.is_file():
            return path
        fd, tmp = tempfile.mkstemp(suffix=".so", dir=path.parent)
        os.close(fd)
        if source is None:
            cmd = command(Path(tmp))
        else:
            src = Path(work) / source[0]
            src.write_text(source[1])
            cmd = command(Path(tmp), src)
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            os.unlink(tmp)
            err = [ln for ln in proc.stderr.splitlines() if "error" in ln] or proc.stderr.splitlines()[-3:]
            raise error(f"nvcc failed to build {what} (exit {proc.returncode}): {' | '.join(err[:3])}")
        os.chmod(tmp, umask_mode(0o777))  # mkstemp's 0600: others sharing the folder could not load it
        os.replace(tmp, path)
        info = {**meta, "seconds": round(seconds, 1), "nvcc": nvcc_version(cmd[0]), "command": cmd,
                **{v: os.environ[v] for v in NVCC_ENV_FLAGS if os.environ.get(v)}}
        ptxas = [ln.strip() for ln in (proc.stdout + proc.stderr).splitlines()
                 if ln.startswith("ptxas info") or "bytes spill" in ln]
        if ptxas:
            info["ptxas"] = ptxas
        path.with_suffix(".json").write_text(json.dumps(info, indent=1))
    return path
