"""Capture a tower's two-length trace pair (the tower side of fp8tower.trace.capture)."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from pathlib import Path

import torch

from .. import backends
from ..formats import Scheme
from ..models import DEFAULT_PARTS, TowerSpec
from ..nn import plan as _plan
from ..nn.merged import MergeMode
from ..trace.capture import capture_pair, check_capture_dir, step_range
from ..trace.manifest import OpRecord
from ..tuning.ceiling import measure_read_ceiling
from ..tuning.timer import event_times_ms
from .build import build_tower, standin_kernel


def capture_arm(
    model: str | TowerSpec,
    arm: str,
    backend: str = "auto",
    m: int = 1,
    steps: tuple[int, int] = (8, 136),
    out_dir: str | Path = "capture",
    scheme: Scheme | str = Scheme.PER_TENSOR,
    device: torch.device | str | None = None,
    *,
    parts: Sequence[str] | str = DEFAULT_PARTS,
    merge_mode: MergeMode | str = MergeMode.EXACT,
    seed: int = 0,
    force: bool = False,
    standin: str = "torch",
):
    """Build and warm up a tower, then capture its two-length trace pair with
    fp8tower.trace.capture.capture_pair: one-step CUDA graph replayed n times (eager steps on
    the CPU), each step in a step range; the manifest's ops are :meth:`Tower.ops`, their
    kernel counts from one eager step's op calls (with a graph: on the graph's kernels, not
    an eager one-launch variant, nn/plan.py). Returns capture_pair's CaptureResult.
    An existing capture in ``out_dir`` is refused unless ``force`` (checked before building).
    ``standin``: the stand-ins' kernel (build.STANDIN_KERNELS), recorded in the manifest."""
    check_capture_dir(out_dir, force)
    with standin_kernel(standin):
        tower = build_tower(model, scheme=scheme, arm=arm, backend=backend, m=m, device=device,
                            seed=seed, parts=parts, merge_mode=merge_mode)
        reason = tower.unservable()
        if reason is not None:
            raise backends.BackendError(reason)
        graph = tower.device.type == "cuda"
        # The eager op calls count the kernels that label the graph's: their plans must run
        # the graph's kernels. H200 2026-12-01 (results/pf_ratios_H200_2026-12-01/call4/):
        # channel_token's pre-pass pairs ran 2 kernels a GEMM in the graph, its eager twins 1,
        # and the capture could not be attributed ("step 0 has 320 kernels but ... 192 per
        # step").
        with _plan.same_kernels_as_graphs() if graph else contextlib.nullcontext():
            return _capture(tower, arm, backend, m, steps, out_dir, force, graph, standin)


def _capture(tower, arm, backend, m, steps, out_dir, force, graph, standin):
    tower.warmup()
    ops = [OpRecord(op.label, op.n, op.k, op.bytes_moved, op.backend, op.kernel_family, 1,
                    op.group) for op in tower.ops()]
    ceiling = None
    if graph:
        ceiling = measure_read_ceiling(tower.device)
        tower.capture(1)

        def run_steps(n: int) -> float:
            def steps() -> None:
                for _ in range(n):
                    with step_range():
                        tower.replay(1)

            return event_times_ms(steps, 1)[0]
    else:
        def run_steps(n: int) -> None:
            for _ in range(n):
                with step_range():
                    tower.step(tower.static_x)

    meta = {
        "arm": arm, "model": tower.spec.name, "m": m, "scheme": tower.scheme.value,
        "backend": backend, "merge_mode": tower.merge_mode.value, "parts": list(tower.parts),
        "gemms_per_step": tower.gemm_count(), "fp8_bytes_per_step": tower.fp8_bytes(),
        "read_ceiling_gbps": ceiling, "standin": standin,
    }
    if tower.spec.tp > 1:  # one tensor-parallel rank's shards (absent: tp 1, as before)
        meta["tp"] = tower.spec.tp
    return capture_pair(run_steps, ops, steps, out_dir, meta, eager_ops=tower.op_calls(),
                        device=tower.device.type, force=force)
