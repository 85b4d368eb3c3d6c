"""ms per decode step of a tower: CUDA events around graph replays of several steps
(tuning.timer), median; on the CPU a wall-clock time of eager steps, labelled as such (not
a GPU number)."""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass

import torch

from ..tuning.timer import event_times_ms
from .build import Tower


@dataclass(frozen=True)
class TowerTiming:
    """ms per decode step: the median over ``replays`` timed runs of ``steps`` steps."""

    ms_per_step: float
    min_ms: float
    max_ms: float
    replays: int
    steps: int
    method: str  # "cuda-graph" or "cpu-eager"

    @property
    def note(self) -> str:
        if self.method == "cuda-graph":
            return (f"CUDA events around {self.replays} replays of a graph of {self.steps} steps;"
                    " median")
        return (f"CPU wall clock of eager steps ({self.replays} x {self.steps}; median): a CPU "
                "number, not a GPU claim")


def time_tower(tower: Tower, *, replays: int = 20, steps: int = 8, warmup: int = 3,
               early: bool | None = None) -> TowerTiming:
    """ms/step of ``tower``: CUDA graph replays timed with events (CUDA), or eager wall clock
    (CPU). Warms the tower up first when needed. No weight rotation: a real tower's step
    reads far more than the L2 (7.2 GB for qwen3.5-27b vs 60 MB on the H200), so each step
    starts cold; a toy tower (tiny-hybrid, 0.7 MB) is timed L2-warm. ``early``: given, the
    graph is captured anew with (True) or without (False) early launch (graph_edges)."""
    if replays < 1 or steps < 1 or warmup < 0:
        raise ValueError(f"bad arguments: {replays=}, {steps=}, {warmup=}")
    if not tower.warm:
        tower.warmup()
    per_step: list[float] = []
    if tower.device.type == "cuda":
        if tower._graph is None or tower.graph_steps != steps or early is not None:
            tower.capture(steps, early=early)
        tower.replay(warmup)
        ms = event_times_ms(lambda: tower.replay(1), replays,
                            torch.cuda.current_stream(tower.device))
        per_step = [t / steps for t in ms]
        method = "cuda-graph"
    else:
        for _ in range(warmup):
            tower.step(tower.static_x)
        for _ in range(replays):
            t0 = time.perf_counter()
            for _ in range(steps):
                tower.step(tower.static_x)
            per_step.append((time.perf_counter() - t0) * 1e3 / steps)
        method = "cpu-eager"
    return TowerTiming(statistics.median(per_step), min(per_step), max(per_step), replays, steps,
                       method)
