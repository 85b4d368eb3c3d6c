"""One entry point for every trace file kind: `load_trace(path)`.

The kind is decided from the file's first bytes, never from its name: gzip or JSON text ->
torch.profiler Chrome trace; "SQLite format 3" -> nsys SQLite export. Anything else is a
`TraceError` that names the file and says what it looks like.
"""

from __future__ import annotations

from pathlib import Path

from .chrome import load_chrome, sniff
from .errors import TraceError
from .events import Trace
from .nsys import load_nsys

DEVICES = ("auto", "cuda", "cpu")


def load_trace(path: str | Path, device: str = "auto") -> Trace:
    """Parse a trace file into a `Trace` (kernel table + step ranges + launches).

    ``device``: "auto" | "cuda" | "cpu" (see `chrome.load_chrome`; nsys traces are CUDA).
    Raises `TraceError` for a missing, truncated, malformed or foreign file, or a trace
    without kernel events.
    """
    if device not in DEVICES:
        raise TraceError(f"device must be one of {', '.join(DEVICES)}, not {device!r}")
    path = Path(path)
    if not path.exists():
        raise TraceError("no such file", path)
    if path.is_dir():
        raise TraceError("is a directory, not a trace file", path)
    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError as e:
        raise TraceError(f"cannot read ({e.strerror})", path) from None
    if head.startswith(b"SQLite format 3\x00"):
        if device == "cpu":
            raise TraceError("an nsys export is a CUDA trace; device 'cpu' does not apply", path)
        return load_nsys(path)
    if path.suffix == ".nsys-rep" or head.startswith(b"QDSTRM") or path.suffix == ".qdrep":
        raise TraceError(
            "an nsys report must be exported first: "
            "nsys export --type sqlite --output OUT.sqlite REPORT",
            path,
        )
    stripped = head.lstrip()
    if head.startswith(b"\x1f\x8b") or stripped[:1] in (b"{", b"["):
        return load_chrome(path, device)
    if not head:
        raise TraceError("empty file, not a trace", path)
    raise TraceError(
        "not a trace (expected a torch.profiler Chrome JSON, .json.gz, or an "
        f"nsys SQLite export; this file {sniff(head)})",
        path,
    )
