"""Capture the two-length trace pair of a workload, and count the kernels each op launches.

The GPU/tower side (building the tower, replaying its CUDA graph) lives in
fp8tower.tower.capture (trace never imports the tower);
this module only needs callables:

- ``run_steps(n)`` replays n decode steps, wrapping each one in ``with step_range():`` so
  the analysis sees per-step boundaries; it may return the CUDA-event time of the n steps
  in ms (recorded in the manifest for comparison with the kernel times);
- ``eager_ops``: (op label, callable) pairs, one per op call of a step in launch order, run
  once eagerly under the profiler, each in its own record_function range, to count the
  kernels each op launches (so the positional mapping stays exact when a backend launches
  several kernels for one op).

On a CPU-only machine the same pipeline runs on the profiler's CPU op events: the
'kernels' are the top-level aten ops, and the manifest says device "cpu".
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import shutil
import tempfile
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from .. import provenance
from .chrome import load_chrome
from .errors import TraceError
from .events import STEP_RANGE
from .manifest import FILENAME, Manifest, OpRecord
from .steps import segment_steps
from .validate import num_field

OP_RANGE_PREFIX = "fp8tower.op:"


def step_range():
    """Context manager marking one decode step for the profiler (record_function range)."""
    import torch

    return torch.profiler.record_function(STEP_RANGE)


def _activities(device: str):
    from torch.profiler import ProfilerActivity

    if device == "cuda":
        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    return [ProfilerActivity.CPU]


def _sync(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.synchronize()


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


@dataclass(frozen=True)
class OpKernels:
    """What one op call launched in the eager profile."""

    label: str
    kernels: int
    names: tuple[str, ...]


def count_kernels_per_op(
    ops: Iterable[tuple[str, Callable[[], object]]], device: str | None = None, warmup: bool = True
) -> list[OpKernels]:
    """Run each op once under the profiler, each in a record_function range, and count the
    kernels (CPU: top-level aten ops) launched inside each range, in order."""
    import torch

    device = device or default_device()
    ops = list(ops)
    if not ops:
        return []
    if warmup:  # lazy init, autotuning and caches happen outside the profile
        for _, fn in ops:
            fn()
        _sync(device)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "eager.json"
        with torch.profiler.profile(activities=_activities(device)) as prof:
            for label, fn in ops:
                with torch.profiler.record_function(OP_RANGE_PREFIX + label):
                    fn()
            _sync(device)
        prof.export_chrome_trace(str(path))
        trace = load_chrome(path, device=device, allow_empty=True)
    seg = segment_steps(trace, len(ops), "^" + re.escape(OP_RANGE_PREFIX), prefer_gpu=False)
    k = trace.kernels
    out = []
    for i, (label, _) in enumerate(ops):
        rows = seg.rows(i)
        out.append(OpKernels(label, len(rows), tuple(k.name(int(r)) for r in rows)))
    return out


@dataclass
class CaptureResult:
    directory: Path
    manifest: Manifest
    traces: tuple[Path, Path]
    op_kernels: list[OpKernels] | None = None


def capture_pair(
    run_steps: Callable[[int], float | None],
    manifest_ops: list[OpRecord],
    steps: tuple[int, int] = (8, 136),
    out_dir: str | Path = "capture",
    meta: dict | None = None,
    *,
    eager_ops: Iterable[tuple[str, Callable[[], object]]] | None = None,
    device: str | None = None,
    warmup_steps: int = 2,
    force: bool = False,
) -> CaptureResult:
    """Profile ``run_steps`` at both lengths; write trace_<n>.json.gz twice and manifest.json.

    Everything is written into a temporary directory next to ``out_dir`` and renamed into
    place when complete, so an interrupted or concurrent capture never leaves a mixed pair.
    An existing capture in ``out_dir`` is refused unless ``force``; then it is replaced whole.

    ``meta`` must name the ``arm``; ``model``, ``m`` and ``read_ceiling_gbps`` (a measured
    read bandwidth) go to their manifest fields, everything else to the manifest's meta.
    With ``eager_ops`` the kernels per op are counted (count_kernels_per_op) and written
    into the manifest's ops; their labels must follow ``manifest_ops`` one to one.
    """
    import torch

    meta = dict(meta or {})
    if not meta.get("arm"):
        raise TraceError("capture meta must name the arm (meta={'arm': ...})")
    short, long = (int(s) for s in steps)
    if not 0 < short < long:
        raise TraceError(f"steps must be 0 < SHORT < LONG, got {short} {long}")
    if meta.get("read_ceiling_gbps") is not None:
        num_field(meta["read_ceiling_gbps"], "read_ceiling_gbps", lo=0.0, lo_open=True)
    device = device or meta.pop("device", None) or default_device()
    if device not in ("cuda", "cpu"):
        raise TraceError(f"device must be 'cuda' or 'cpu', got {device!r}")
    out = Path(out_dir)
    check_capture_dir(out, force)

    ops = list(manifest_ops)
    counted = None
    if eager_ops is not None:
        counted = count_kernels_per_op(eager_ops, device)
        if [c.label for c in counted] != [op.label for op in ops]:
            raise TraceError("eager_ops labels must follow manifest_ops one to one, in order")
        zero = [c.label for c in counted if c.kernels == 0]
        if zero:
            raise TraceError(f"op(s) launched no kernel in the eager profile: {zero[:5]}")
        ops = [dataclasses.replace(op, kernels=c.kernels) for op, c in zip(ops, counted)]

    if warmup_steps:
        run_steps(warmup_steps)
        _sync(device)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        paths, event_ms = [], []
        for n in (short, long):
            path = tmp / f"trace_{n}.json.gz"
            with torch.profiler.profile(activities=_activities(device)) as prof:
                ret = run_steps(n)
                _sync(device)
            prof.export_chrome_trace(str(path))
            paths.append(out / path.name)
            event_ms.append(None if ret is None else float(ret))
        dropped = _inconsistent_event_ms(event_ms)
        if dropped:
            # the trace pair is still exact (the kernels' own times); only the cross-check
            # is dropped. H100 2026-12-05 (results/session39_2026-12-05/call1/): the tiny
            # tower's 2 / 4 steps under 14 test workers timed 0.362 / 0.278 ms, and the
            # capture wrote a manifest its own reader refused.
            event_ms = [None, None]
            meta["event_ms_dropped"] = dropped
        manifest = _manifest(torch, device, meta, ops, short, long, paths, event_ms, out)
        manifest.write(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it 0o700; a plain mkdir would not
        _move_into_place(tmp, out, force)
    except BaseException:
        _remove(tmp)
        raise
    return CaptureResult(out, manifest, (paths[0], paths[1]), counted)


def _remove(tmp: Path) -> None:
    """Take out a failed capture's temporary folder. A Ctrl-C while the profiler exported a
    trace left it behind once in four tries (2026-12-05 audit): tried twice, then named."""
    import time

    for _ in range(2):
        shutil.rmtree(tmp, ignore_errors=True)
        if not tmp.exists():
            return
        time.sleep(0.5)
    warnings.warn(f"could not remove the failed capture's temporary folder {tmp}: remove it "
                  "yourself", RuntimeWarning, stacklevel=3)


def _inconsistent_event_ms(event_ms: list[float | None]) -> str | None:
    """Why the two runs' CUDA-event times cannot be a step time (not finite numbers >= 0, or
    the longer run not longer: manifest.read_manifest refuses a manifest that holds them),
    or None."""
    short_ms, long_ms = event_ms
    if short_ms is None or long_ms is None:
        return None
    if not all(math.isfinite(t) and t >= 0 for t in (short_ms, long_ms)):
        return (f"the CUDA-event times ({short_ms} / {long_ms} ms) are not finite times >= 0; "
                f"the event times were not recorded (the kernels' times are unaffected)")
    if long_ms > short_ms:
        return None
    return (f"the long run's CUDA-event time ({long_ms:.4f} ms) was not more than the short "
            f"run's ({short_ms:.4f} ms): the GPU was shared or the steps too short to time; "
            f"the event times were not recorded (the kernels' times are unaffected)")


def check_capture_dir(out: str | Path, force: bool = False) -> None:
    """Whether a capture may be written to ``out``: an absent or empty directory is fine; an
    existing capture only with ``force``; any other non-empty directory never (replacing it
    would delete files that are not ours)."""
    if not str(out).strip():
        raise TraceError("the capture output folder (--out) is empty: give a path")
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise TraceError("capture output exists and is not a directory", out)
    # the nearest existing folder above must be a writable folder: the capture is written
    # beside it first (a temporary name the user never gave), after the whole run
    parent = out.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        raise TraceError(f"capture output cannot be made: {parent} is not a directory", out)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise TraceError(f"capture output cannot be made: {parent} is not writable", out)
    if not out.is_dir() or not any(out.iterdir()):
        return
    if not (out / FILENAME).exists():
        raise TraceError(
            "capture output is a non-empty directory without a capture manifest: not "
            "replaced (choose a new or empty directory)",
            out,
        )
    if not force:
        raise TraceError(
            "already holds a capture; pass --force (force=True) to replace it whole", out
        )


def _move_into_place(tmp: Path, out: Path, force: bool) -> None:
    """Rename the complete capture ``tmp`` to ``out``; an old capture there (force) is moved
    aside first and deleted after, so ``out`` is always one whole capture or absent."""
    old = None
    if out.is_dir():
        check_capture_dir(out, force)  # again: another process may have written it meanwhile
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-", dir=out.parent))
        os.replace(out, old / out.name)
    try:
        os.rename(tmp, out)
    except OSError as e:
        if old is not None and not out.exists():
            os.rename(old / out.name, out)  # put the old capture back, whole
        raise TraceError(
            f"cannot move the finished capture into place ({e.strerror}): did another "
            "capture write it meanwhile?",
            out,
        ) from None
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def _manifest(torch, device, meta, ops, short, long, paths, event_ms, out) -> Manifest:
    info = provenance.record(gpu_name=torch.cuda.get_device_name() if device == "cuda" else "")
    ceiling = meta.pop("read_ceiling_gbps", None)
    if ceiling is not None:
        ceiling = num_field(ceiling, "read_ceiling_gbps", lo=0.0, lo_open=True)
    return Manifest(
        arm=str(meta.pop("arm")),
        steps=(short, long),
        device=device,
        ops=ops,
        traces=(paths[0].name, paths[1].name),
        model=meta.pop("model", None),
        m=meta.pop("m", None),
        step_range=STEP_RANGE,
        event_ms=(event_ms[0], event_ms[1]) if None not in event_ms else None,
        read_ceiling_gbps=ceiling,
        meta={**info, **meta},
        directory=out,
    )


def fake_workload(
    sizes: Iterable[tuple[int, int]] = ((64, 96), (32, 64), (96, 32)), m: int = 1, seed: int = 0
):
    """A tiny CPU stand-in for a tower (tests, demos): one torch.matmul per (n, k) shape.

    Returns (run_steps, ops, eager_ops) ready for `capture_pair`.
    """
    import torch

    g = torch.Generator().manual_seed(seed)
    weights = [torch.randn(k, n, generator=g) for n, k in sizes]
    x = [torch.randn(m, k, generator=g) for _, k in sizes]
    labels = [f"linear{i}.{n}x{k}" for i, (n, k) in enumerate(sizes)]
    calls = [(lbl, (lambda a=a, w=w: torch.matmul(a, w))) for lbl, a, w in zip(labels, x, weights)]

    def run_steps(n: int) -> None:
        for _ in range(n):
            with step_range():
                for _, fn in calls:
                    fn()

    ops = [
        OpRecord(
            lbl,
            n,
            k,
            n * k * 4 + m * k * 4 + m * n * 4,
            "torch-cpu",
            r"^aten::(matmul|mm|linear|addmm)$",
        )
        for lbl, (n, k) in zip(labels, sizes)
    ]
    return run_steps, ops, calls
