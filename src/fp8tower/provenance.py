"""The one version/provenance record: what produced a number (tuning cache metadata,
benchmark JSON, ``fp8tower bench`` / ``info``, trace manifests).

:func:`versions` is what must match for a cached decision to be trusted (GPU, driver, CUDA,
torch, triton, fp8tower and its kernel code); :func:`record` adds python, host, date and
command line. Package
versions come from their metadata, never from importing them: importing triton before
``TRITON_INTERPRET=1`` is set leaves a process unable to interpret kernels (triton 3.9).
torch is imported only by :func:`versions` (its CUDA build and the GPU need it).
:func:`record` also names the code that ran: the git commit (and whether the tree differed
from it) and :func:`package_code`, a hash of every source of the package.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import importlib.metadata
import importlib.util
import itertools
import os
import platform
import re
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from . import __version__
from .paths import cache_dir, cache_file_name


def release(version: str) -> tuple[int, ...]:
    """(3, 6) of '3.6.0' or '3.5.0+git1a2b'; () where it does not start with a number."""
    out = []
    for part in version.split(".")[:2]:
        digits = "".join(itertools.takewhile(str.isdigit, part))
        if not digits:
            break
        out.append(int(digits))
    return tuple(out)


def package_version(name: str, missing: str = "none") -> str:
    """An installed distribution's version from its metadata (``missing`` if absent)."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return missing


def driver_version() -> str:
    """The NVIDIA driver version: pynvml if importable, else /proc (Linux), else 'unknown'."""
    if importlib.util.find_spec("pynvml") is not None:
        import pynvml

        try:
            pynvml.nvmlInit()
            v = pynvml.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)
        except pynvml.NVMLError:
            pass
    try:
        text = Path("/proc/driver/nvidia/version").read_text()
    except OSError:
        return "unknown"
    m = re.search(r"Kernel Module\s+(?:for \S+\s+)?([0-9][0-9.]+)", text)
    return m.group(1) if m else "unknown"


# The sources of the code the tuner times, and of how it times: GEMM and activation kernels,
# backends, their CUDA; the tuner (its chain, timer, search space filters) and the graph edge
# rewrite every timed graph goes through (graph_edges.py: early launch). Folders or files.
# formats.py and problem.py: the kernels import their constants and scale rules. Keep it to
# timing code: it stamps every tuning cache, so a wider hash (the whole package: see
# package_code, recorded in results) would invalidate every cache on unrelated edits.
_KERNEL_SOURCES = ("kernels", "backends", "tuning", "graph_edges.py", "formats.py",
                   "problem.py")
_SOURCE_SUFFIXES = (".py", ".cu", ".cuh", ".h", ".hpp")


@functools.cache
def kernel_code() -> str:
    """16 hex digits of sha256 over fp8tower's kernel, backend and tuning sources
    (``_KERNEL_SOURCES``). A tuning cache made with other kernel code holds timings of other
    kernels: the fp8tower version alone did not change when they did (2026-12-01: an entry of
    channel_token 5120x17408 kept 48.8 us, measured before its pre-pass got fast, against
    28 us since)."""
    root = Path(__file__).parent
    files = []
    for sub in _KERNEL_SOURCES:
        path = root / sub
        files += [path] if path.is_file() else sorted(path.rglob("*"))
    return _source_digest(root, files)


@functools.cache
def package_code() -> str:
    """16 hex digits of sha256 over every source of the package (``_SOURCE_SUFFIXES``, paths
    sorted): the code a result came from, recorded by :func:`record`. Not :func:`kernel_code`,
    whose narrow scope is on purpose: it stamps tuning caches (:func:`versions`), and any edit
    of the package (a CLI, a model family) would then invalidate every cache."""
    root = Path(__file__).parent
    return _source_digest(root, sorted(root.rglob("*")))


def _source_digest(root: Path, files: Sequence[Path]) -> str:
    """16 hex digits of sha256 over ``files`` (in that order) that are sources: each one's
    path under ``root`` and its bytes."""
    h = hashlib.sha256()
    for f in files:
        if f.is_file() and f.suffix in _SOURCE_SUFFIXES:
            h.update(f.relative_to(root).as_posix().encode() + b"\0")
            h.update(f.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def _git(folder: Path, *args: str) -> str | None:
    """``git -C folder ARGS``' stdout; None where git is missing, fails or hangs."""
    try:
        out = subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True,
                             timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout if out.returncode == 0 else None


def git_state() -> dict:
    """``git_commit`` (``git rev-parse HEAD``) of the repository the package's sources are
    tracked in and ``git_dirty``: whether ``git status --porcelain`` lists anything (untracked
    files count). Both None where the package is no checkout's (an installed wheel, also one
    inside another repository's venv) or git is absent; never raises."""
    here = Path(__file__)
    if _git(here.parent, "ls-files", "--error-unmatch", here.name) is None:  # not tracked
        return {"git_commit": None, "git_dirty": None}
    commit = (_git(here.parent, "rev-parse", "HEAD") or "").strip()
    status = _git(here.parent, "status", "--porcelain")
    return {"git_commit": commit or None,
            "git_dirty": None if status is None else bool(status.strip())}


def now_iso() -> str:
    """UTC now, ISO 8601 to the second."""
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def result_path(folder: str | Path, stem: str, when: datetime.datetime | str) -> Path:
    """A default results path no earlier run holds: ``folder/<stem>_<date>.json``, or where
    that exists (a second run that day) ``<stem>_<date>_<HHMMSS>.json``, then ``-2``, ``-3``,
    ...: two runs of one day never overwrite each other (``when``: a datetime or an ISO
    string, e.g. :func:`now_iso`'s). An explicit path is the user's choice, not this."""
    if isinstance(when, str):
        when = datetime.datetime.fromisoformat(when)
    folder = Path(folder)
    path = folder / f"{stem}_{when.date()}.json"
    base = f"{stem}_{when.date()}_{when:%H%M%S}"
    n = 1
    while path.exists():
        path = folder / (f"{base}.json" if n == 1 else f"{base}-{n}.json")
        n += 1
    return path


def versions(gpu_name: str | None) -> dict:
    """GPU (None: 'cpu'), driver, CUDA (torch's build), torch, triton, fp8tower and its
    kernel code (:func:`kernel_code`), cuDNN and its frontend (the cudnn backend's plan
    indices index cuDNN's heuristics list), CUTLASS (nvidia-cutlass: the headers the
    cutlass backend's kernels are built from)."""
    import torch

    return {
        "gpu": gpu_name or "cpu",
        "driver": driver_version() if gpu_name else "n/a",
        "cuda": torch.version.cuda or "none",
        "torch": torch.__version__,
        # nightly torch ships Triton as pytorch-triton: its version, not "none"
        "triton": package_version("triton", package_version("pytorch-triton")),
        "fp8tower": __version__,
        "kernels": kernel_code(),
        "cudnn": str(torch.backends.cudnn.version() or "none"),
        "cudnn_frontend": package_version("nvidia-cudnn-frontend"),
        "cutlass": package_version("nvidia-cutlass"),
    }


def current_gpu() -> str | None:
    """The current CUDA device's name, None without one."""
    import torch

    return torch.cuda.get_device_name() if torch.cuda.is_available() else None


def tuning_cache(gpu_name: str | None) -> dict | None:
    """The tuning cache file ``auto`` reads on this GPU: its path and 16 hex digits of sha256
    of its bytes (None without a GPU; sha256 None while there is no file)."""
    if not gpu_name:
        return None
    path = cache_dir() / cache_file_name(gpu_name)
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        digest = None
    return {"path": str(path), "sha256": digest}


def record(argv: Sequence[str] | None = None, *, gpu_name: str | None = None) -> dict:
    """:func:`versions` of the current GPU (or ``gpu_name``) plus python, host, date, the
    command line (``argv``, default ``sys.argv``), the FP8TOWER_* environment variables set
    (tuning, plans, early launch: they change what runs), the tuning cache file read, and the
    code that ran: :func:`git_state` and :func:`package_code`. Those two are not in
    :func:`versions` (what a tuning cache must match): any edit would invalidate caches."""
    argv = list(sys.argv if argv is None else argv)
    gpu = gpu_name if gpu_name is not None else current_gpu()
    return {
        **versions(gpu),
        "python": platform.python_version(),
        "host": platform.node(),
        "date": now_iso(),
        "command": shlex.join(argv),  # quoted: runs again as pasted (a ';' in --plan did not)
        "env": {k: v for k, v in sorted(os.environ.items()) if k.startswith("FP8TOWER_")},
        "tuning_cache": tuning_cache(gpu),
        **git_state(),
        "package_code": package_code(),
    }
