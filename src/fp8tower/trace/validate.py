"""Typed reads of values that come from files (traces, manifests, map files): each check
fails with one `TraceError` line naming the file, the field and what was expected.

Values are validated where they enter, so nothing downstream sums a NaN duration, wraps an
integer beyond int64 or takes a boolean for a count.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

from .errors import TraceError

INT64_MIN, INT64_MAX = -(1 << 63), (1 << 63) - 1
#: grid and block dims are 32-bit in CUDA (gridDim.x < 2^31)
DIM_MAX = (1 << 31) - 1
#: float64 holds every integer up to 2^53 exactly; trace times beyond it lose microseconds
EXACT_MAX = float(1 << 53)


def show(value: object, limit: int = 60) -> str:
    """A short repr of a bad value for an error message."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def loads(raw: bytes | str, path: object, what: str) -> Any:
    """json.loads that turns malformed, undecodable or too deeply nested input into one line."""
    try:
        return json.loads(raw)
    except RecursionError:
        raise TraceError(f"{what}: JSON nested too deeply to read", path) from None
    except (ValueError, UnicodeDecodeError) as e:  # JSONDecodeError is a ValueError
        raise TraceError(f"{what}: malformed JSON ({e})", path) from None


def is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def int_field(
    value: object,
    where: str,
    path: object = None,
    *,
    lo: int = INT64_MIN,
    hi: int = INT64_MAX,
    expected: str | None = None,
) -> int:
    """An integer (not a bool, not a float) in [lo, hi]."""
    if not is_int(value) or not lo <= value <= hi:
        if expected is None:
            expected = (
                "an integer"
                if (lo, hi) == (INT64_MIN, INT64_MAX)
                else f"an integer >= {lo}"
                if hi == INT64_MAX
                else f"an integer in [{lo}, {hi}]"
            )
        raise TraceError(f"{where} must be {expected}, got {show(value)}", path)
    return value


def num_field(
    value: object,
    where: str,
    path: object = None,
    *,
    lo: float | None = None,
    lo_open: bool = False,
    hi: float | None = None,
    expected: str | None = None,
) -> float:
    """A finite number (int or float, not a bool) >= lo (> lo when ``lo_open``), <= hi."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        try:
            f = float(value)
        except OverflowError:  # an int beyond float range
            ok = False
        else:
            ok = math.isfinite(f)
            if ok and lo is not None:
                ok = f > lo if lo_open else f >= lo
            if ok and hi is not None:
                ok = f <= hi
    if not ok:
        if expected is None:
            bound = "" if lo is None else f" {'>' if lo_open else '>='} {lo:g}"
            expected = f"a finite number{bound}"
        raise TraceError(f"{where} must be {expected}, got {show(value)}", path)
    return f


def str_field(value: object, where: str, path: object = None, *, empty: bool = False) -> str:
    if not isinstance(value, str) or (not empty and not value):
        raise TraceError(
            f"{where} must be a {'' if empty else 'non-empty '}string, got {show(value)}", path
        )
    return value


def check_one_group(entries, what: str) -> None:
    """``entries``: (where, label, group) of each rule / op. A label is one row of the per-op
    tables and `compare` puts a row's whole time in one group (the first it meets): a label
    in two groups is refused, naming both."""
    first: dict[str, tuple[str, str]] = {}
    for where, label, group in entries:
        seen = first.setdefault(label, (where, group))
        if seen[1] != group:
            raise TraceError(
                f"label {label!r} is in two groups, {seen[1]!r} ({seen[0]}) and {group!r} "
                f"({where}): its whole time would count in the first; give its {what} one "
                "group, or two labels"
            )


def check_no_duplicates(k, path) -> None:
    """``k`` (a KernelTable sorted by start) holds no kernel twice. A profiler writes each
    kernel execution once; a file concatenated or merged twice repeats them, and each would
    count twice. Repeats share their start, so only the rows whose start equals a
    neighbour's are compared."""
    tie = np.diff(k.start_us) == 0
    rows = np.flatnonzero(np.concatenate(([False], tie)) | np.concatenate((tie, [False])))
    if not len(rows):
        return
    key = np.column_stack(
        [
            k.start_us[rows].view(np.int64),
            k.dur_us[rows].view(np.int64),
            k.stream[rows],
            k.correlation[rows],
            k.name_id[rows].astype(np.int64),
            # two nodes of one replay may run the same kernel at one timestamp: not repeats
            k.graph_node_id[rows],
        ]
    )
    _, first, counts = np.unique(key, axis=0, return_index=True, return_counts=True)
    if counts.max() > 1:
        row = int(rows[first[counts > 1].min()])
        raise TraceError(
            f"{int((counts - 1).sum())} kernel event(s) repeat another exactly (same name, "
            f"stream, start, duration and correlation), the first {k.name(row)[:80]!r} at ts "
            f"{k.start_us[row]:.3f} us: a profiler writes each kernel once; was the file "
            "concatenated or merged twice?",
            path,
        )
