"""The GPU's read ceiling: GB/s of a large read, timed like the GEMMs (tuning.timer)."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from typing import Any

import torch

from .timer import Timer, time_cuda_graph

READ_CEILING_BYTES = 4_000_000_000  # the ceiling's default read: 4 GB (decimal), far above any L2


def read_ceiling(
    device: torch.device | int | None = None,
    nbytes: int = READ_CEILING_BYTES,
    *,
    timer: Timer | None = None,
) -> dict[str, float]:
    """GB/s (decimal, 1e9 B/s) of a large read per method, timed like the GEMMs.

    Methods (all read ``nbytes`` once per call and write a negligible output):
    ``sum_fp32`` (x.sum() to a scalar), ``amax_bf16`` (the same bytes as bf16, x.amax()),
    ``rowsum_fp32`` (rows of 16384 fp32 summed: writes nbytes / 16384 bytes, not counted),
    ``triton_read`` (kernels/read_ceiling.py, when triton is installed: the fastest on the
    H200, 4.39 TB/s on 2026-11-29).
    Reductions are what the GEMMs' weight reads look like: read-only, no write stream.
    """
    timer = timer or (lambda make_call, n: time_cuda_graph(make_call, n, replays=10, min_calls=3))
    row = 16384
    numel = max(row, nbytes // 4 // row * row)
    device = torch.cuda.current_device() if device is None else device
    out = {}
    with torch.cuda.device(device):  # the harness times on the current device
        buf = torch.zeros(numel, dtype=torch.float32, device=device)
        methods: dict[str, Callable[[], Any]] = {
            "sum_fp32": lambda: buf.sum(),
            "amax_bf16": lambda: buf.view(torch.bfloat16).amax(),
            "rowsum_fp32": lambda: buf.view(-1, row).sum(dim=1),
        }
        if importlib.util.find_spec("triton") is not None:
            from ..kernels.read_ceiling import streaming_read

            sms = torch.cuda.get_device_properties(device).multi_processor_count
            partial = torch.empty(sms * 4, dtype=torch.float32, device=device)
            methods["triton_read"] = lambda: streaming_read(buf, partial, sms * 4)
        for name, fn in methods.items():
            t = timer(lambda i, fn=fn: fn, 1)  # far above 3x L2 by itself: one copy is cold
            out[name] = numel * 4 / t.median_us / 1e3
    return out


def measure_read_ceiling(
    device: torch.device | int | None = None,
    nbytes: int = READ_CEILING_BYTES,
    *,
    timer: Timer | None = None,
) -> float:
    """The best GB/s (decimal) of :func:`read_ceiling`'s methods: this GPU's read ceiling."""
    return max(read_ceiling(device, nbytes, timer=timer).values())
