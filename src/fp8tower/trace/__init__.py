"""Traces: what ran and where the time of a decode step went.

Pipeline (pure functions from parsed events to tables, HTA style; `tables` turns results
into JSON documents and rows; printing and files in `report`):

    capture_pair  -> trace_<short>.json.gz, trace_<long>.json.gz, manifest.json
    load_trace    -> Trace (numpy kernel table, step ranges, launch calls)
    diff_traces   -> per kernel name launches and ms per step (two-length difference)
    load_arm + attribute -> per op launches, ms, share, bytes, GB/s; kernel-family check
    compare       -> both arms op group by op group, ranked by delta: the levers

Importing this package loads numpy only; torch, matplotlib and jinja2 load where used.
"""

from .arm import Arm, load_arm
from .attribute import Attribution, Mismatch, OpRow, attribute, kernel_family
from .capture import (
    CaptureResult,
    OpKernels,
    capture_pair,
    count_kernels_per_op,
    fake_workload,
    step_range,
)
from .compare import Comparison, compare
from .diff import DiffResult, KernelDelta, diff_traces
from .errors import TraceError
from .events import STEP_RANGE, KernelTable, Trace
from .ingest import load_trace
from .manifest import Manifest, OpRecord, read_manifest
from .mapfile import Rule, read_map

__all__ = [
    "STEP_RANGE",
    "Arm",
    "Attribution",
    "CaptureResult",
    "Comparison",
    "DiffResult",
    "KernelDelta",
    "KernelTable",
    "Manifest",
    "Mismatch",
    "OpKernels",
    "OpRecord",
    "OpRow",
    "Rule",
    "Trace",
    "TraceError",
    "attribute",
    "capture_pair",
    "compare",
    "count_kernels_per_op",
    "diff_traces",
    "fake_workload",
    "kernel_family",
    "load_arm",
    "load_trace",
    "read_manifest",
    "read_map",
    "step_range",
]
