"""The one timer: CUDA events around CUDA-graph replays (tuning, tower timing, benchmarks).

:func:`time_cuda_graph` (docs/performance.md states the method in its opening paragraph):

1. ``make_call(i)`` builds a closure over the i-th rotated weight copy, for i < n_copies
   (``make_call.restart()``, where it has one, is called as the capture begins);
   :func:`rotation_copies` picks n_copies so the copies exceed 3x the L2 (60 MB on the H200):
   consecutive calls never find their weights in L2.
2. Eager warm-up on a side stream (Triton compiles, cuBLASLt picks and allocates workspaces).
3. ONE CUDA graph captures the calls on copies 0, 1, ..., n_copies-1 in sequence (repeated
   round-robin to at least ``min_calls`` calls, so event resolution is negligible), its
   PDL edges moved to early launch as in every graph fp8tower captures (graph_edges.py).
4. ``warmup`` replays, then ``replays`` replays each bracketed by CUDA events on the stream.
   Per replay: elapsed / calls = microseconds per call. Reported: the median over replays,
   the min, and the spread (max - min) / median.

:func:`event_times_ms` is step 4 alone, for callers that own their graph (the tower) or
time eager work (a trace capture's steps).

Nothing here touches CUDA at import; CUDA paths run only when called on a GPU.
"""

from __future__ import annotations

import functools
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from .. import graph_edges

# Cold L2: the rotated copies together exceed this many L2s (docs/performance.md).
L2_FACTOR = 3
# Cap on copies: weights under ~0.7 MB (3 x 60 MB / 256) are then timed partly warm; no
# decode shape of the models we target is that small.
MAX_COPIES = 256


@dataclass(frozen=True)
class Timing:
    """Per-call time over ``replays`` graph replays of ``calls`` calls on ``copies`` copies."""

    median_us: float
    min_us: float
    max_us: float
    replays: int = 1
    calls: int = 1
    copies: int = 1

    @property
    def spread(self) -> float:
        """(max - min) / median over the replays."""
        return (self.max_us - self.min_us) / self.median_us if self.median_us > 0 else 0.0


MakeCall = Callable[[int], Callable[[], Any]]


class Timer(Protocol):
    """Times ``make_call(i)()`` for i in range(n_copies); tests inject a fake one."""

    def __call__(self, make_call: MakeCall, n_copies: int) -> Timing: ...


def l2_cache_bytes(device: torch.device | int | None = None) -> int:
    """The L2 size of a CUDA device (0 for the CPU)."""
    if isinstance(device, torch.device) and device.type != "cuda":
        return 0
    return int(torch.cuda.get_device_properties(device).L2_cache_size)


def rotation_copies(
    bytes_per_copy: int, l2_bytes: int, *, factor: int = L2_FACTOR, max_copies: int = MAX_COPIES
) -> int:
    """Copies whose total exceeds ``factor`` x the L2 (at least 1, at most ``max_copies``)."""
    if bytes_per_copy <= 0:
        raise ValueError(f"bytes_per_copy must be positive, got {bytes_per_copy}")
    if l2_bytes <= 0:
        return 1
    return max(1, min(max_copies, factor * l2_bytes // bytes_per_copy + 1))


def time_cuda_graph(
    make_call: MakeCall,
    n_copies: int,
    *,
    replays: int = 20,
    warmup: int = 3,
    min_calls: int = 32,
) -> Timing:
    """Median per-call time of ``make_call(i)()`` under one CUDA graph (see module doc).

    The closures must work on tensors of the current CUDA device and must not synchronize
    (they are captured). Raises RuntimeError without CUDA or under an ongoing capture.
    """
    if not torch.cuda.is_available():
        raise RuntimeError("time_cuda_graph needs a CUDA GPU")
    if torch.cuda.is_current_stream_capturing():
        raise RuntimeError("time_cuda_graph cannot run while a CUDA graph is being captured")
    if n_copies < 1 or replays < 1 or warmup < 0 or min_calls < 1:
        raise ValueError(f"bad arguments: {n_copies=}, {replays=}, {warmup=}, {min_calls=}")
    calls = [make_call(i) for i in range(n_copies)]
    n_calls = n_copies * -(-min_calls // n_copies)  # every copy used equally often

    # Eager warm-up on a side stream, as torch recommends before a capture.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for j in range(max(n_copies, 3)):
            calls[j % n_copies]()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    graph = graph_edges.new_graph()
    restart = getattr(make_call, "restart", None)  # search._make_call's x-writer count:
    if restart is not None:  # the captured calls' alone, not the warm-up's
        restart()
    # thread_local: other threads of a serving process may keep using CUDA meanwhile.
    # PDL edges launch early, as in every graph fp8tower captures (graph_edges.py).
    with graph_edges.capture(graph, capture_error_mode="thread_local"):
        for j in range(n_calls):
            calls[j % n_copies]()
    for _ in range(warmup):
        graph.replay()
    per_call = [ms * 1e3 / n_calls for ms in event_times_ms(graph.replay, replays)]  # ms -> us
    del graph
    return Timing(
        median_us=statistics.median(per_call),
        min_us=min(per_call),
        max_us=max(per_call),
        replays=replays,
        calls=n_calls,
        copies=n_copies,
    )


def early_launch_state(gpu_name: str | None) -> bool | None:
    """Whether the graphs :func:`time_cuda_graph` captures here move their PDL edges to early
    launch (graph_edges.capture): ``FP8TOWER_EARLY_LAUNCH`` on, and a torch and driver that
    can edit graph edges (where they cannot, capture times the graph as captured, with only a
    warning). A cache file records it (tuning.cache.environment_meta): timings with and
    without differ by up to 3.9% a step (graph_edges.py's evidence). None for the CPU."""
    if gpu_name is None:
        return None
    return graph_edges.enabled() and _can_edit_graphs()


@functools.cache
def _can_edit_graphs() -> bool:
    """What graph_edges.capture checks before it edits: a torch that keeps captured graphs
    editable (keep_graph) and a driver with the edge API; False without CUDA."""
    if not torch.cuda.is_available():
        return False
    if not getattr(graph_edges.new_graph(), "fp8tower_editable", False):
        return False
    try:
        graph_edges._driver()  # the check capture makes (RuntimeError: the API is missing)
    except RuntimeError:
        return False
    return True


def event_times_ms(fn: Callable[[], Any], repeats: int, stream=None, *,
                   sync_each: bool = False) -> list[float]:
    """ms of each of ``repeats`` calls of ``fn``, each bracketed by CUDA events recorded on
    ``stream`` (default: the current stream); one synchronize at the end, or after each call
    with ``sync_each`` (each call then starts on an idle GPU, its launch included)."""
    stream = stream or torch.cuda.current_stream()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
              for _ in range(repeats)]
    for start, end in events:
        start.record(stream)
        fn()
        end.record(stream)
        if sync_each:
            end.synchronize()
    end.synchronize()
    return [s.elapsed_time(e) for s, e in events]
