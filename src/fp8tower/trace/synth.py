"""Synthetic torch-profiler traces in kineto's own layouts, for tests and benchmarks.

`write_torch_trace` streams a Chrome trace (plain or gzipped) with the events a real
capture of a decode loop has: process/thread metadata, one `fp8tower.step` record_function
range per step, `cudaGraphLaunch` runtime events whose correlation id every replayed kernel
shares (torch 2.11 on the H200), or one `cudaLaunchKernel` per kernel (eager), `ac2g` flow
events, and kernel events with kineto's kernel args. Three layouts:

- "kineto": torch >= 2.12 (one key per line, `"dur": x\\n    ,\\n    "args"`),
- "kineto_old": the older C++ writer (`"ph": "X", "cat": "kernel", "name": ..., "pid": ...`),
- "compact": `torch.profiler` python export / `json.dump(separators=(",", ":"))`.
"""

from __future__ import annotations

import gzip
import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from .events import STEP_RANGE

_BASE_NS = 5_136_607_151_093_403  # a realistic kineto relative timestamp (ns)


@dataclass(frozen=True)
class KernelSpec:
    """One kernel launch of a step: name, mean duration (us), launch dims."""

    name: str
    dur_us: float
    grid: tuple[int, int, int] = (1, 1, 1)
    block: tuple[int, int, int] = (128, 1, 1)


def _ts(ns: int) -> str:
    return f"{ns // 1000}.{ns % 1000:03d}"


def _event(layout: str, cat: str, name: str, pid, tid, ts_ns: int, dur_ns: int, args: str) -> str:
    pid_s = pid if isinstance(pid, int) else f'"{pid}"'
    tid_s = tid if isinstance(tid, int) else f'"{tid}"'
    if layout == "compact":
        a = f',"args":{{{args}}}' if args else ""
        return (
            f'{{"ph":"X","cat":"{cat}","name":"{name}","pid":{pid_s},"tid":{tid_s},'
            f'"ts":{_ts(ts_ns)},"dur":{_ts(dur_ns)}{a}}},\n'
        )
    if layout == "kineto_old":
        a = f',\n    "args": {{\n      {args}\n    }}' if args else ""
        return (
            f'  {{\n    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid_s}, '
            f'"tid": {tid_s},\n    "ts": {_ts(ts_ns)}, "dur": {_ts(dur_ns)}{a}\n  }},\n'
        )
    a = f'\n    ,\n    "args": {{\n      {args}\n    }}' if args else ""
    return (
        f'  {{\n    "ph": "X",\n    "cat": "{cat}",\n    "name": "{name}",\n'
        f'    "pid": {pid_s},\n    "tid": {tid_s},\n    "ts": {_ts(ts_ns)},\n'
        f'    "dur": {_ts(dur_ns)}{a}\n  }},\n'
    )


def _flow(layout: str, ph: str, flow_id: int, pid, tid, ts_ns: int) -> str:
    bp = ', "bp": "e"' if ph == "f" else ""
    if layout == "compact":
        return (
            f'{{"ph":"{ph}","id":{flow_id},"pid":{pid},"tid":{tid},"ts":{_ts(ts_ns)},'
            f'"cat":"ac2g","name":"ac2g"{bp.replace(" ", "")}}},\n'
        )
    return (
        f'  {{\n    "ph": "{ph}", "id": {flow_id}, "pid": {pid}, "tid": {tid}, '
        f'"ts": {_ts(ts_ns)},\n    "cat": "ac2g", "name": "ac2g"{bp}\n  }},\n'
    )


def _meta(layout: str, name: str, pid, tid, key: str, value: str) -> str:
    if layout == "compact":
        return (
            f'{{"ph":"M","name":"{name}","ts":0.000,"pid":{pid},"tid":{tid},'
            f'"args":{{"{key}":{value}}}}},\n'
        )
    return (
        f'  {{\n    "name": "{name}", "ph": "M", "ts": 0.000, "pid": {pid}, "tid": {tid},\n'
        f'    "args": {{\n      "{key}": {value}\n    }}\n  }},\n'
    )


def _kernel_args(
    layout: str, ext: int, stream: int, corr: int, spec: KernelSpec, graph: tuple[int, int] | None
) -> str:
    sep = ", " if layout != "compact" else ","
    nl = "\n      " if layout != "compact" else ""
    g = spec.grid
    b = spec.block
    graph_s = f'"graph id": {graph[0]}{sep}"graph node id": {graph[1]},{nl}' if graph else ""
    return (
        f'"External id": {ext},{nl}"queued": 0{sep}"device": 0{sep}"context": 1,{nl}'
        f'"stream": {stream}{sep}"correlation": {corr},{nl}{graph_s}'
        f'"registers per thread": 168,{nl}"shared memory": 99328,{nl}'
        f'"blocks per SM": 0.969697,{nl}"warps per SM": 3.878788,{nl}'
        f'"grid": [{g[0]}{sep}{g[1]}{sep}{g[2]}],{nl}"block": [{b[0]}{sep}{b[1]}{sep}{b[2]}],'
        f'{nl}"est. achieved occupancy %": 6'
    )


def write_torch_trace(
    path: str | Path,
    steps: int,
    step_kernels: Sequence[KernelSpec],
    *,
    graph: bool = True,
    graph_ids: bool = False,
    step_ranges: bool = True,
    gpu_step_ranges: bool = False,
    layout: str = "kineto",
    prologue: Sequence[KernelSpec] = (),
    jitter: float = 0.02,
    seed: int = 0,
    stream: int = 7,
    step_name: str = STEP_RANGE,
) -> Path:
    """Write a trace of ``steps`` decode steps, each launching ``step_kernels`` in order.

    ``prologue`` kernels run once before the steps (eager), as a real capture's input copies
    do. ``step_name`` names the per-step record_function range. Durations get a
    deterministic multiplicative jitter of +-``jitter``.
    """
    if layout not in ("kineto", "kineto_old", "compact"):
        raise ValueError(f"layout must be kineto, kineto_old or compact, not {layout!r}")
    path = Path(path)
    rng = np.random.default_rng(seed)
    host_pid, host_tid = 4242, 4242
    with (
        gzip.open(path, "wb", compresslevel=6) if path.suffix == ".gz" else open(path, "wb") as raw,
        io.TextIOWrapper(raw, encoding="utf-8") as f,
    ):
        f.write(
            '{\n  "schemaVersion": 1,\n  "deviceProperties": [\n    {"id": 0, "name": '
            '"NVIDIA H200", "totalGlobalMem": 150754820096, "computeMajor": 9, '
            '"computeMinor": 0}\n  ],\n  "displayTimeUnit": "ms",\n  "baseTimeNanoseconds": '
            '1790857026000000000,\n  "traceEvents": [\n'
        )
        f.write(_meta(layout, "process_name", host_pid, 0, "name", '"python"'))
        f.write(_meta(layout, "thread_name", host_pid, host_tid, "name", '"thread 4242 (python)"'))
        f.write(_meta(layout, "process_name", 0, 0, "name", '"python"'))
        f.write(_meta(layout, "process_labels", 0, 0, "labels", '"GPU 0"'))
        f.write(_meta(layout, "thread_name", 0, stream, "name", f'"stream {stream} "'))
        t = _BASE_NS + 1_000_000  # host clock
        gpu_t = t
        corr = 100
        ext = 1

        def launch_kernels(specs, graph_launch: bool) -> tuple[int, int]:
            """Write the launches and kernels; return (first kernel start, last kernel end)."""
            nonlocal t, gpu_t, corr, ext
            n = len(specs)
            durs = [
                max(1, int(s.dur_us * 1000 * (1 + jitter * (2 * r - 1))))
                for s, r in zip(specs, rng.random(n))
            ]
            gaps = (800 + 1200 * rng.random(n)).astype(int)
            if graph_launch:
                corr += 1
                f.write(
                    _event(
                        layout,
                        "cuda_runtime",
                        "cudaGraphLaunch",
                        host_pid,
                        host_tid,
                        t,
                        9_000,
                        f'"External id": {ext}, "cbid": 311, "correlation": {corr}',
                    )
                )
                f.write(_flow(layout, "s", corr, host_pid, host_tid, t))
                gpu_t = max(gpu_t, t + 12_000)
            first = gpu_t
            for i, spec in enumerate(specs):
                if not graph_launch:
                    corr += 1
                    f.write(
                        _event(
                            layout,
                            "cuda_runtime",
                            "cudaLaunchKernel",
                            host_pid,
                            host_tid,
                            t,
                            4_000,
                            f'"External id": {ext}, "cbid": 211, "correlation": {corr}',
                        )
                    )
                    f.write(_flow(layout, "s", corr, host_pid, host_tid, t))
                    gpu_t = max(gpu_t, t + 5_000)
                    t += 5_000
                    if i == 0:
                        first = gpu_t
                gid = (1, 1000 + i) if (graph_launch and graph_ids) else None
                f.write(
                    _event(
                        layout,
                        "kernel",
                        spec.name,
                        0,
                        stream,
                        gpu_t,
                        durs[i],
                        _kernel_args(layout, ext, stream, corr, spec, gid),
                    )
                )
                f.write(_flow(layout, "f", corr, 0, stream, gpu_t))
                last_end = gpu_t + durs[i]
                gpu_t = last_end + int(gaps[i])
            ext += 1
            return first, (last_end if n else first)

        launch_kernels(list(prologue), False)
        for step in range(steps):
            step_start = t
            t += 2_000
            first, last = launch_kernels(list(step_kernels), graph)
            t = max(t, gpu_t) + 3_000  # host synchronizes at the end of each step
            if step_ranges:
                f.write(
                    _event(
                        layout,
                        "user_annotation",
                        step_name,
                        host_pid,
                        host_tid,
                        step_start,
                        t - step_start,
                        f'"External id": {ext}, "Record function id": 0, "Ev Idx": {step}',
                    )
                )
                ext += 1
            if gpu_step_ranges:
                f.write(
                    _event(
                        layout,
                        "gpu_user_annotation",
                        step_name,
                        0,
                        stream,
                        first - 1,
                        last - first + 2,
                        f'"External id": {ext}',
                    )
                )
            t += 1_000
        f.write(
            '  {\n    "name": "Record Window End", "ph": "i", "s": "g",\n'
            f'    "pid": "", "tid": "", "ts": {_ts(t)}\n  }}\n  ],\n'
            '  "traceName": "synthetic"\n}\n'
        )
    return path


def tower_kernels(
    gemms: int = 208, others_per_gemm: float = 1.84, seed: int = 1
) -> list[KernelSpec]:
    """A decode step like the report's 27B tower: ``gemms`` FP8 GEMMs with realistic kernel
    names (nvjet / CUTLASS / Triton) and element-wise kernels in between (~590 per step)."""
    rng = np.random.default_rng(seed)
    cutlass = (
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<cute::tuple<int, "
        "int, int, int>, cutlass::gemm::collective::CollectiveMma<cutlass::gemm::"
        "MainloopSm90TmaGmmaWarpSpecializedFP8<3, cute::tuple<cute::C<1>, cute::C<2>, "
        "cute::C<1> >, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum>, "
        "cute::tuple<cute::C<64>, cute::C<128>, cute::C<128> >, cutlass::float_e4m3_t, "
        "cute::tuple<long, cute::C<1>, long>, cutlass::float_e4m3_t>, cutlass::epilogue::"
        "collective::CollectiveEpilogue<cutlass::bfloat16_t, void> > >(cutlass::gemm::"
        "kernel::GemmUniversal::Params)"
    )
    gemm_names = [
        ("nvjet_sm90_tst_64x8_64x16_4x1_v_bz_splitK_TNT", (132, 1, 1)),
        ("nvjet_sm90_tst_128x16_64x8_2x1_h_bz_coopA_TNT", (80, 1, 1)),
        (cutlass, (128, 1, 1)),
        ("_fp8_gemm_swapab_kernel", (160, 1, 4)),
    ]
    others = [
        (
            "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, "
            "std::array<char*, 1ul> >(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
        ),
        (
            "void (anonymous namespace)::rms_norm_kernel<c10::BFloat16, 8>(c10::BFloat16*, "
            "c10::BFloat16 const*, c10::BFloat16 const*, float, int, int)"
        ),
        (
            "void at::native::elementwise_kernel<128, 2, at::native::gpu_kernel_impl_nocast<at::native"
            "::BinaryFunctor<c10::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal"
            "::MulFunctor<float> > >(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16,"
            " c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float> > const&)"
            "::{lambda(int)#1}>(int, at::native::gpu_kernel_impl_nocast<at::native::BinaryFunctor<c10"
            "::BFloat16, c10::BFloat16, c10::BFloat16, at::native::binary_internal::MulFunctor<float>"
            " > >(at::TensorIteratorBase&, at::native::BinaryFunctor<c10::BFloat16, c10::BFloat16, "
            "c10::BFloat16, at::native::binary_internal::MulFunctor<float> > const&)::{lambda(int)#1})"
        ),
    ]
    specs: list[KernelSpec] = []
    extra = 0.0
    for g in range(gemms):
        name, grid = gemm_names[g % len(gemm_names)]
        specs.append(KernelSpec(name, float(20 + 300 * rng.random()), grid))
        extra += others_per_gemm
        while extra >= 1:
            specs.append(KernelSpec(others[int(rng.integers(len(others)))], 3.0, (66, 1, 1)))
            extra -= 1
    return specs
