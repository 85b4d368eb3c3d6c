"""Compile the Triton GEMM for a GPU target on any machine: no GPU and no driver needed.

The CPU interpreter checks numerics, not code generation. Compiling for sm_90 gives what an
H100/H200 would build: shared memory, registers, spills, how many programs fit on an SM
(hence the waves of a grid) and the PTX (are W tiles copied 16 bytes at a time by
cp.async, is the dot an FP8 wgmma). tests/test_offline_sm90.py checks the default configs
this way in CI; benchmarks/static_sm90.py puts these facts next to measured H200 times.

It relies on triton internals (a stub driver through ``driver.set_active``,
``MockTensor``, ``JITFunction.warmup``), checked with triton 3.9. Run it in a process that
did not import triton under ``TRITON_INTERPRET=1``: interpreted @jit functions (triton's
own helpers too) cannot be compiled.

    python -m fp8tower.kernels.offline --shape 10240x5120 --m 1,32   # JSON per scheme
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import json
import math
import os
import re
import subprocess
import tempfile
import time
from collections import Counter

import torch

from ..formats import Scheme
from ..problem import GemmProblem
from .configs import H200_SMS, SMEM_PER_SM, SMEM_RESERVED_PER_PROGRAM

# sm_90 per-SM limits besides shared memory (CUDA C Programming Guide, capability 9.0).
SMEM_PER_BLOCK = 232_448
REGS_PER_SM, REG_ALLOC_PER_WARP, MAX_WARPS, MAX_BLOCKS = 65_536, 256, 64, 32


@dataclasses.dataclass
class KernelFacts:
    """What one compiled GEMM variant needs on the target (sm_90 limits for occupancy)."""

    scheme: str
    m: int
    n: int
    k: int
    config: dict
    x_fp8: bool
    compile_s: float  # ~0 when triton's on-disk cache already held the variant
    shared_bytes: int  # dynamic + static shared memory of one program
    registers: int | None  # per thread (None: cuobjdump not found)
    spill_bytes: int | None  # local memory per thread (register spills)
    programs_per_sm: int | None
    grid_programs: int
    ptx_ops: dict  # counts of the instructions that matter for a streaming GEMM
    loads_after_loop: int  # ld.global after the last loop (loads_after_loop)

    @property
    def waves(self) -> float | None:
        """Grid programs / resident slots on an H200 (132 SMs)."""
        if not self.programs_per_sm:
            return None
        return self.grid_programs / (H200_SMS * self.programs_per_sm)


class _OfflineDriver:
    """Just enough of a triton driver to compile for ``target`` (nothing is launched)."""

    def __init__(self, target):
        self.target = target

    def get_current_device(self):
        return ("fp8tower-offline", self.target.arch)  # its own JIT cache, never device 0's

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target

    def get_active_torch_device(self):
        return torch.device("cpu")


@contextlib.contextmanager
def offline_target(capability: tuple[int, int] = (9, 0)):
    """Make triton compile for ``capability`` while inside, whatever GPU (if any) is here."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime.driver import driver

    previous = driver._active
    driver.set_active(_OfflineDriver(GPUTarget("cuda", capability[0] * 10 + capability[1], 32)))
    try:
        yield
    finally:
        driver._active = previous


def _resource_usage(cubin: bytes) -> tuple[int | None, int | None, int]:
    """(registers, local bytes, static shared bytes) from cuobjdump, if triton ships it."""
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin",
                        "cuobjdump")
    if not os.path.exists(tool):
        return None, None, 0
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        out = subprocess.run([tool, "--dump-resource-usage", f.name], capture_output=True,
                             text=True, check=True).stdout

    def field(name):
        m = re.search(rf"\b{name}:(\d+)", out)
        return int(m.group(1)) if m else None

    return field("REG"), field("LOCAL"), field("SHARED") or 0


def resident_programs(shared: int, registers: int | None, warps: int) -> int:
    """Programs of a build resident per SM under the sm_90 limits (shared memory, registers,
    warps); configs.programs_per_sm estimates the same before building."""
    by_smem = SMEM_PER_SM // (shared + SMEM_RESERVED_PER_PROGRAM)
    by_warps = MAX_WARPS // warps
    by_regs = REGS_PER_SM // program_registers(registers, warps) if registers else by_warps
    return max(0, min(by_smem, by_regs, by_warps, MAX_BLOCKS))


def program_registers(registers: int, warps: int) -> int:
    """Registers one program takes of an SM's file: ``registers`` a thread, allocated per
    warp in units of REG_ALLOC_PER_WARP."""
    return math.ceil(registers * 32 / REG_ALLOC_PER_WARP) * REG_ALLOC_PER_WARP * warps


_PTX_OPS = re.compile(r"^\s*(?:@!?%p\d+\s+)?([a-z][\w.:]*)", re.MULTILINE)


def _ptx_summary(ptx: str) -> dict:
    ops = Counter(_PTX_OPS.findall(ptx))
    keep = ("cp.async", "ld.global", "st.global", "wgmma.mma_async", "mma.sync", "cvt.rn",
            "bar.sync", "atom", "griddepcontrol", "prefetch")
    return {op: n for op, n in sorted(ops.items()) if op.startswith(keep)}


_LABEL = re.compile(r"^(\$L__BB\d+_\d+):", re.MULTILINE)
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__BB\d+_\d+);")


def loads_after_loop(ptx: str) -> int:
    """ld.global instructions after the kernel's last backward branch (the end of its last
    loop): round trips to memory that every program's tail waits for. The epilogue's scales
    loaded there cost the 27B tower 1.2-1.7% (kernels/fp8_gemm.py, where they are loaded
    now)."""
    lines = ptx.splitlines()
    labels, end = set(), -1  # no loop: every load
    for line_no, line in enumerate(lines):
        m = _LABEL.match(line)
        if m:
            labels.add(m.group(1))
        b = _BRANCH.search(line)
        if b and b.group(1) in labels:  # a branch back to a label above: a loop's end
            end = line_no
    return sum(1 for line in lines[end + 1:] if "ld.global" in line)


def compile_gemm(problem: GemmProblem, config: dict, capability: tuple[int, int] = (9, 0),
                 *, bias: bool = False) -> KernelFacts:
    """Compile the GEMM variant that ``triton`` would launch for ``problem`` with ``config``
    (``bias``: the variant for a layer with a bias)."""
    from triton.runtime.jit import MockTensor

    from . import fp8_gemm
    from .configs import SCHEME_ID, block_m_for, split_per_token, x_is_fp8

    kernel = fp8_gemm._fp8_gemm_decode_kernel
    if type(kernel).__name__ != "JITFunction":
        raise RuntimeError(
            f"the GEMM kernel was imported as {type(kernel).__name__} (TRITON_INTERPRET=1?): "
            "compile offline in a process without the interpreter"
        )
    p, cfg = problem, config
    x_fp8 = x_is_fp8(p.scheme, p.act_dtype == torch.float8_e4m3fn, cfg)
    rows = 2 * p.m if p.scheme is Scheme.WEIGHT_ONLY and x_fp8 else p.m  # its split x
    bm = block_m_for(rows, split=rows != p.m)
    bn, bk, split = cfg["block_n"], cfg["block_k"], cfg["split_k"]
    x_dtype = torch.float8_e4m3fn if x_fp8 else p.act_dtype
    k_per_split = math.ceil(math.ceil(p.k / bk) / split) * bk  # as fp8_gemm.launch
    # Scale strides as triton_gemm._run passes them (0 and 1 specialize differently).
    k_blocks = -(-p.k // 128)
    ws_stride = k_blocks if p.scheme is Scheme.BLOCK128 else 0
    xs_stride = {Scheme.BLOCK128: k_blocks, Scheme.WEIGHT_ONLY: k_blocks,
                 Scheme.CHANNEL_TOKEN: 1}.get(p.scheme, 0)
    if not x_fp8:  # no pre-pass scales: _run passes the weight scales with stride 0
        xs_stride = 0
    elif split_per_token(p.scheme, cfg, p.m):  # weight_only's split, one scale a row
        xs_stride = 1
    t = time.perf_counter()
    with offline_target(capability):
        compiled = kernel.warmup(
            MockTensor(torch.float8_e4m3fn, [p.n, p.k]), MockTensor(x_dtype, [rows, p.k]),
            MockTensor(p.out_dtype, [p.m, p.n]), MockTensor(torch.float32, [p.n]),
            MockTensor(torch.float32, [p.m]), MockTensor(p.out_dtype, [p.n]),
            # Without split-K, fp8_gemm.launch passes y for the unused pointers: same types
            # here, or the build would not be the one a launch looks up in the cache.
            MockTensor(torch.float32 if split > 1 else p.out_dtype, [split, p.n]),
            MockTensor(torch.int32 if split > 1 else p.out_dtype, [p.n]),
            p.m, p.n, p.k, k_per_split,
            -(-p.k // bk) * bn * bk if cfg.get("packed") else p.k,  # stride_wn, as launch_args
            p.k, p.n, ws_stride, xs_stride,
            SCHEME=SCHEME_ID[p.scheme], X_FP8=x_fp8, HAS_BIAS=bias, BLOCK_N=bn, BLOCK_M=bm,
            BLOCK_K=bk, SPLIT_K=split, FMAX=448.0, SMIN=1e-12, INTERPRET=False,
            EVEN_N=p.n % bn == 0, EVEN_K=p.k % bk == 0, num_warps=cfg["num_warps"],
            num_stages=cfg["num_stages"], grid=(1,),
            PREFETCH=cfg.get("prefetch", 0), PDL=cfg.get("pdl", False),
            AMAX_CHUNKS=fp8_gemm.amax_chunks(SCHEME_ID[p.scheme], x_fp8, p.m, p.k, bm,
                                             cfg.get("wo_mode", 0)),
            X_ROW1=fp8_gemm.row1(SCHEME_ID[p.scheme], x_fp8, p.m, cfg.get("wo_mode", 0)),
            PACKED=bool(cfg.get("packed")),
            X_ROWS=fp8_gemm.x_rows(SCHEME_ID[p.scheme], x_fp8, p.m, bm),
            **({"WO_MODE": cfg["wo_mode"]} if cfg.get("wo_mode") else {}),
            **({"launch_pdl": True} if cfg.get("pdl") else {}),
        )
    seconds = time.perf_counter() - t
    regs, local, static = _resource_usage(compiled.asm["cubin"])
    shared = compiled.metadata.shared + static
    return KernelFacts(
        scheme=p.scheme.value, m=p.m, n=p.n, k=p.k, config=dict(cfg), x_fp8=x_fp8,
        compile_s=seconds, shared_bytes=shared, registers=regs, spill_bytes=local,
        programs_per_sm=resident_programs(shared, regs, cfg["num_warps"]),
        grid_programs=-(-p.n // bn) * split * -(-rows // bm),  # as the launch: x rows
        ptx_ops=_ptx_summary(compiled.asm["ptx"]),
        loads_after_loop=loads_after_loop(compiled.asm["ptx"]),
    )


@dataclasses.dataclass
class PrecompileReport:
    jobs: int
    variants: int  # distinct builds (jobs that differ only in M within a BLOCK_M share one)
    workers: int
    seconds: float
    failures: list[str]

    def summary(self) -> str:
        s = (f"built {self.variants - len(self.failures)} of {self.variants} Triton variants "
             f"in {self.seconds:.1f} s on {self.workers} processes")
        return s + (f"; failed: {self.failures[0]}" if self.failures else "")


def _worker_init() -> None:
    # Before this process imports triton. Nothing else changes: triton's cache key includes
    # its environment variables, and it must equal the key of the launching process.
    os.environ.pop("TRITON_INTERPRET", None)


def _build(job) -> str | None:
    problem, config = job
    try:
        compile_gemm(problem, config, problem.capability or (9, 0))
    except Exception as e:  # noqa: BLE001 (a worker reports, the tuner still times it)
        return f"{problem.key()} {config}: {type(e).__name__}: {e}"[:300]
    return None


def _variant_key(problem: GemmProblem, config: dict) -> tuple:
    from . import fp8_gemm
    from .configs import SCHEME_ID, block_m_for, x_is_fp8

    x_fp8 = x_is_fp8(problem.scheme, problem.act_dtype == torch.float8_e4m3fn, config)
    return (problem.scheme, problem.act_dtype, problem.out_dtype, problem.capability,
            problem.n, problem.k, block_m_for(problem.m), json.dumps(config, sort_keys=True),
            # one token quantized in the GEMM is its own build, as is each X_ROWS (2, 4, 8)
            fp8_gemm.row1(SCHEME_ID[problem.scheme], x_fp8, problem.m, config.get("wo_mode", 0)),
            fp8_gemm.x_rows(SCHEME_ID[problem.scheme], x_fp8, problem.m,
                            block_m_for(problem.m)))


def precompile(jobs, workers: int | None = None) -> PrecompileReport:
    """Compile the GEMM variants of [(problem, config), ...] in ``workers`` fresh processes
    (default: the CPUs less one, at most 16). Each lands in triton's on-disk cache under the
    key a launch on that GPU computes, so the launch loads it instead of compiling (tuning
    compiles one variant at a time otherwise). A failed build is reported, not raised."""
    import concurrent.futures
    import multiprocessing

    unique = {}
    for p, cfg in jobs:
        unique.setdefault(_variant_key(p, cfg), (p, cfg))
    todo = list(unique.values())
    if workers is None:
        workers = max(1, min(16, (os.cpu_count() or 2) - 1))
    workers = max(1, min(workers, len(todo)))
    t = time.perf_counter()
    failures: list[str] = []
    if todo:
        ctx = multiprocessing.get_context("spawn")  # no CUDA or triton state inherited
        try:
            with concurrent.futures.ProcessPoolExecutor(workers, mp_context=ctx,
                                                        initializer=_worker_init) as pool:
                chunk = max(1, len(todo) // (4 * workers))
                failures = [f for f in pool.map(_build, todo, chunksize=chunk) if f]
        except (concurrent.futures.process.BrokenProcessPool, OSError) as e:
            # e.g. a main module spawn cannot re-import (python - < script): build as we go
            failures = [f"the worker processes failed: {type(e).__name__}: {e}"]
    return PrecompileReport(len(jobs), len(todo), workers, time.perf_counter() - t, failures)


def _shape(text: str) -> tuple[int, int]:
    try:
        n, k = (int(v) for v in text.lower().split("x"))
    except ValueError:
        n = k = 0
    if n < 1 or k < 1:
        raise argparse.ArgumentTypeError(f"shape {text!r}: expected NxK with N, K >= 1, "
                                         "e.g. 10240x5120")
    return n, k


def _ints(text: str) -> list[int]:
    try:
        ms = [int(v) for v in text.split(",")]
    except ValueError:
        ms = [0]
    if min(ms) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: expected integers >= 1, e.g. 1,32")
    return ms


def _schemes(text: str) -> list[Scheme]:
    try:
        return [Scheme.parse(v) for v in text.split(",")]
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", action="append", required=True, type=_shape,
                    help="NxK (repeatable)")
    ap.add_argument("--m", default="1,32", type=_ints, help="token counts, comma-separated")
    ap.add_argument("--scheme", default=",".join(s.value for s in Scheme),
                    type=_schemes,
                    help="schemes, comma-separated")
    ap.add_argument("--priority", action="store_true",
                    help="also the configs the tuner times first (kernels.configs.wave_fits)")
    args = ap.parse_args(argv)
    if importlib.util.find_spec("triton") is None:  # else a traceback from compile_gemm
        ap.exit(2, "error: compiling the kernels needs triton >= 3.5: "
                   "pip install 'fp8tower[triton]'\n")
    from . import configs

    out = []
    for n, k in args.shape:
        for scheme in args.scheme:
            for m in args.m:
                p = GemmProblem(m, n, k, scheme, capability=(9, 0))
                cfgs = [("default", configs.default_config(p))]
                if args.priority:
                    cfgs += [("priority", c) for c in configs.wave_fits(p)]
                for role, cfg in cfgs:
                    facts = compile_gemm(p, cfg)
                    out.append({**dataclasses.asdict(facts), "role": role, "waves": facts.waves,
                                "estimated_programs_per_sm": configs.programs_per_sm(cfg, p)})
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
