"""The parsed form of a trace: one kernel table in numpy columns, plus the few ranges and
launches that give step boundaries. Every ingest path (torch Chrome JSON, nsys SQLite)
produces a `Trace`; every analysis reads only this.

Times are microseconds (float64) on the trace's own clock.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

#: record_function / NVTX range name that marks one decode step (see capture.step_range).
STEP_RANGE = "fp8tower.step"


@dataclass
class KernelTable:
    """Kernel executions, one row each, sorted by start time.

    ``name_id`` indexes ``names``; absent integer fields are -1 (grid/block: 0).
    """

    names: list[str]
    name_id: np.ndarray  # int32
    start_us: np.ndarray  # float64
    dur_us: np.ndarray  # float64
    stream: np.ndarray  # int64
    correlation: np.ndarray  # int64
    grid: np.ndarray  # int32, shape (n, 3)
    block: np.ndarray  # int32, shape (n, 3)
    graph_id: np.ndarray  # int64
    graph_node_id: np.ndarray  # int64

    def __len__(self) -> int:
        return len(self.name_id)

    @classmethod
    def empty(cls) -> KernelTable:
        i64 = np.zeros(0, np.int64)
        return cls(
            [],
            np.zeros(0, np.int32),
            np.zeros(0),
            np.zeros(0),
            i64,
            i64.copy(),
            np.zeros((0, 3), np.int32),
            np.zeros((0, 3), np.int32),
            i64.copy(),
            i64.copy(),
        )

    def take(self, idx: np.ndarray) -> KernelTable:
        """Rows ``idx`` (index array or boolean mask), names list shared."""
        return KernelTable(
            self.names,
            self.name_id[idx],
            self.start_us[idx],
            self.dur_us[idx],
            self.stream[idx],
            self.correlation[idx],
            self.grid[idx],
            self.block[idx],
            self.graph_id[idx],
            self.graph_node_id[idx],
        )

    def sorted(self) -> KernelTable:
        """Rows in start-time order (stable)."""
        order = np.argsort(self.start_us, kind="stable")
        if np.all(order == np.arange(len(order))):
            return self
        return self.take(order)

    def name(self, row: int) -> str:
        return self.names[int(self.name_id[row])]

    @property
    def end_us(self) -> np.ndarray:
        return self.start_us + self.dur_us

    def without_overlap(self) -> KernelTable:
        """Each kernel from the later of its start and the end of every kernel before it (in
        start order, any stream of the one GPU a trace may hold: ingest refuses two GPUs) to
        its own end: a partition of the busy span, so per-kernel sums add up to the time the
        kernels take together. Kernels launched early
        (programmatic dependent launch) start while their predecessor runs and wait on the
        GPU; their raw durations overlap and sum to more than the step (27B tower, block128
        M = 32 with early launch, H200: 3.68 ms of kernel time in a 2.47 ms step). A kernel
        wholly inside an earlier one's span gets zero. The table's own if nothing overlaps."""
        end = self.end_us
        before = np.concatenate(([-np.inf], np.maximum.accumulate(end)[:-1])) if len(end) else end
        start = np.maximum(self.start_us, before)
        if np.array_equal(start, self.start_us):
            return self
        out = self.take(np.arange(len(self)))
        out.start_us = start
        out.dur_us = np.maximum(end - start, 0.0)
        return out

    @property
    def has_graph_ids(self) -> bool:
        return bool(len(self) and np.any(self.graph_node_id >= 0))


@dataclass(frozen=True)
class Range:
    """A named host range (record_function / NVTX) or its GPU projection."""

    name: str
    start_us: float
    end_us: float
    tid: int = -1
    on_gpu: bool = False


@dataclass
class Launches:
    """Host-side launch calls (cudaLaunchKernel, cudaGraphLaunch, ...): they share their
    correlation id with the kernels they launched (all kernels of a graph replay share one)."""

    correlation: np.ndarray  # int64
    start_us: np.ndarray  # float64
    tid: np.ndarray  # int64
    is_graph: np.ndarray  # bool: cudaGraphLaunch / cuGraphLaunch

    @classmethod
    def empty(cls) -> Launches:
        return cls(np.zeros(0, np.int64), np.zeros(0), np.zeros(0, np.int64), np.zeros(0, bool))

    def __len__(self) -> int:
        return len(self.correlation)


@dataclass
class Trace:
    """One ingested trace file."""

    path: str
    source: str  # "torch" | "nsys"
    device: str  # "cuda" | "cpu" (a CPU run: the 'kernels' are top-level aten ops)
    kernels: KernelTable
    ranges: list[Range] = field(default_factory=list)
    launches: Launches = field(default_factory=Launches.empty)
    graph_trace_mode: str | None = None  # nsys: "node" | "graph" | None (unknown)
    notes: list[str] = field(default_factory=list)

    @property
    def is_cpu(self) -> bool:
        return self.device == "cpu"

    def without_overlap(self) -> Trace:
        """This trace with its kernels as :meth:`KernelTable.without_overlap` gives them."""
        kernels = self.kernels.without_overlap()
        if kernels is self.kernels:
            return self
        return dataclasses.replace(self, kernels=kernels)
