"""CUTLASS backend: CUTLASS 3.x sm90 FP8 GEMMs with small-M decode tiles, built just in time.

The GEMM (csrc/cutlass/fp8_gemm.cu) is swap-AB: D (N, M) = W (N, K) @ x.T, so the weight's N
fills the wide tile side and the few tokens (16/32/64) the narrow one. One build = one kernel
config (schedule + tile), compiled by nvcc from the headers of the ``nvidia-cutlass`` pip
package into a plain shared library with a C entry point (no torch extension: it builds on a
machine without a GPU or a CUDA torch), cached on disk under ``<cache dir>/cutlass/`` by a key
of source hash + config + flags + nvcc version + CUTLASS version, loaded with ctypes and
called with raw device pointers on torch's current stream. Schedules (see the .cu file):

- ``sk``: cooperative persistent kernel with the stream-K scheduler: split-K (``splits``) or
  stream-K (``mode``) chosen at run time, for shapes whose N / 128 tiles cannot fill the GPU;
- ``pp``: ping-pong persistent kernel, 64-row tiles;
- ``ws``: plain warp-specialized, non-persistent;
- ``pf``: CUTLASS example 63: triggers dependents early (``overlap``), launched with
  programmatic dependent launch (``pdl``) so that consecutive kernels overlap; it prefetches
  weights before ``griddepcontrol.wait`` only for a ``prefetch`` ratio > 0;
- ``bp`` / ``bk`` (block128 only): CUTLASS's blockwise-scaled FP8 mainloop, each 128-wide K
  step's partial sums scaled in registers by the weight block's and the token group's scale;
  ping-pong with 64-row tiles, or cooperative 128-row tiles with the stream-K scheduler
  (split-K at run time). The weight's 128-row block scales are repeated to 64-row groups
  once, at prepare, so that a 64-row tile holds one.

A config's ``cluster`` (2 or 4; default 1) builds the kernel with that many CTAs a thread
block cluster along the weight's rows, sharing each x tile by TMA multicast (x read from L2
once a cluster, not once a CTA): named by a benchmark arm only, never by the tuner, until a
GPU has measured it (benchmarks/results/session70_2026-12-08/).

Activations are quantized by a separate launch (``act_quant``), as for cuBLASLt. Serves
per_tensor (scalar or per-channel weight scale), channel_token and block128, bfloat16
output.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import importlib.metadata
import importlib.util
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import paths
from ..formats import FP8_DTYPE, Fp8Weight, Scheme
from ..problem import GemmProblem
from ..provenance import release
from . import Backend, act_quant, other_cuda_device
from .nvcc import (
    build_library,
    build_workers,
    nvcc_env_key,
    nvcc_path,
    nvcc_version,
    sm90a_unavailable,
)
from .stream import TORCH_ACT_QUANT_KERNELS, fp8_act_scale

PACKAGE = "nvidia-cutlass"
MIN_CUTLASS = (4, 2)  # pyproject's cutlass extra
INSTALL = f"pip install --no-deps '{PACKAGE}>=4.2'"
SOURCE = Path(__file__).parent / "csrc" / "cutlass" / "fp8_gemm.cu"
EXAMPLE_63 = "examples/63_hopper_gemm_with_weight_prefetch"
# Schedule name -> FP8T_SCHED; tile M (weight rows per CTA) each schedule builds.
SCHEDULES = {"ws": 0, "pp": 1, "sk": 2, "pf": 3, "bp": 4, "bk": 5}
_TILE_M = {"ws": 64, "pp": 64, "sk": 128, "pf": 64, "bp": 64, "bk": 128}
BLOCKWISE = frozenset({"bp", "bk"})  # block128's schedules (and block128 runs only these)
# sk and bk build without griddepcontrol (see the .cu file): CUTLASS 4.2.0's stream-K code for
# it does not compile under nvcc 13.0; the others have it, so a PDL launch is safe for them.
_GDC = {"ws": True, "pp": True, "sk": False, "pf": True, "bp": True, "bk": False}
# The weight's block scales as the blockwise builds read them: one per 64 rows (the .cu file).
SCALE_ROWS = 64
MODES = {"heuristic": 0, "splitk": 1, "streamk": 2}
# Cluster sizes a build may take (FP8T_CM in the .cu file); 1 (no cluster) unless a config says
CLUSTERS = (1, 2, 4)
NVCC_FLAGS = (
    "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "--expt-relaxed-constexpr",
    "-gencode", "arch=compute_90a,code=sm_90a", "-DNDEBUG",
)
# TMA needs 16-byte aligned rows: K fp8 elements and N bf16 outputs (D's leading dimension).
_ALIGN = 16


class CutlassError(RuntimeError):
    """A CUTLASS build or launch failed for this config (tuning records it and moves on)."""


# ============================================================================ toolchain


def cutlass_version() -> str | None:
    try:
        return importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        return None


def cutlass_root() -> Path | None:
    """``cutlass_library/source`` of the installed package (found without importing it)."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    root = Path(next(iter(spec.submodule_search_locations))) / "source"
    return root if (root / "include" / "cutlass" / "cutlass.h").is_file() else None


def build_unavailable() -> str | None:
    """None when this machine can build the kernels (nvcc + CUTLASS headers), else why not."""
    version = cutlass_version()
    if cutlass_root() is None or version is None:
        return (f"the {PACKAGE} package (CUTLASS headers) is not installed: {INSTALL} (the "
                "fp8tower[cutlass] extra, less its Python DSL's dependencies)")
    if () < release(version) < MIN_CUTLASS:  # () : not a number, not refused on a guess
        return f"{PACKAGE} {version} is older than the kernels need: {INSTALL}"
    if nvcc_path() is None:
        return "no CUDA compiler: nvcc is not on PATH (nor in $CUDA_HOME/bin)"
    return None


def _unavailable() -> str | None:
    return sm90a_unavailable(build_unavailable())


# ============================================================================ builds


@dataclass(frozen=True)
class BuildSpec:
    """One compiled kernel config: schedule and tile (M: weight rows, N: tokens, K)."""

    sched: str
    tile_m: int
    tile_n: int
    tile_k: int = 128
    cluster: int = 1  # CTAs a cluster along the weight's rows, sharing x by TMA multicast

    def __post_init__(self) -> None:
        if self.sched not in SCHEDULES:
            raise ValueError(f"unknown CUTLASS schedule {self.sched!r}: expected one of {', '.join(SCHEDULES)}")
        if self.cluster not in CLUSTERS:
            raise ValueError(f"CUTLASS cluster size {self.cluster!r}: expected one of "
                             f"{', '.join(map(str, CLUSTERS))}")

    @property
    def name(self) -> str:
        c = f"_c{self.cluster}" if self.cluster > 1 else ""
        return f"{self.sched}_{self.tile_m}x{self.tile_n}x{self.tile_k}{c}"

    def defines(self) -> list[str]:
        d = [f"-DFP8T_TM={self.tile_m}", f"-DFP8T_TN={self.tile_n}", f"-DFP8T_TK={self.tile_k}",
             f"-DFP8T_SCHED={SCHEDULES[self.sched]}", f"-DFP8T_KERNEL={self.name}"]
        d += [f"-DFP8T_CM={self.cluster}"] if self.cluster > 1 else []
        return d + (["-DCUTLASS_ENABLE_GDC_FOR_SM90"] if _GDC[self.sched] else [])


def cache_dir() -> Path:
    """``<fp8tower cache dir>/cutlass`` (fp8tower.paths.cache_dir)."""
    return paths.cache_dir() / "cutlass"


def build_key(spec: BuildSpec, *, source: str, nvcc_ver: str, cutlass_ver: str,
              env_flags: str = "") -> str:
    """Hash of everything that makes a build differ: source, config, flags (the
    environment's NVCC_PREPEND/APPEND_FLAGS too: ``env_flags``), nvcc, CUTLASS."""
    h = hashlib.sha256()
    for part in (source, spec.name, *spec.defines(), *NVCC_FLAGS, nvcc_ver, cutlass_ver, env_flags):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:16]


def library_path(spec: BuildSpec, source: str | None = None) -> Path:
    """Where ``spec``'s shared library lives in the disk cache (built or not); ``source``:
    the .cu text of the key (read from SOURCE when None)."""
    reason = build_unavailable()
    if reason is not None:
        raise CutlassError(f"cannot build CUTLASS kernels: {reason}")
    key = build_key(spec, source=SOURCE.read_text() if source is None else source,
                    nvcc_ver=nvcc_version(nvcc_path()), cutlass_ver=cutlass_version(),
                    env_flags=nvcc_env_key())
    return cache_dir() / f"{spec.name}-{key}.so"


def nvcc_command(spec: BuildSpec, out: Path, source: Path | None = None) -> list[str]:
    root = cutlass_root()
    includes = [root / "include", root / "tools" / "util" / "include", root / EXAMPLE_63]
    return [nvcc_path(), *NVCC_FLAGS, *spec.defines(), *(f"-I{p}" for p in includes),
            str(SOURCE if source is None else source), "-o", str(out)]


def build(spec: BuildSpec) -> Path:
    """The cached library of ``spec``, compiled first when missing (backends/nvcc.py): nvcc
    compiles a copy of the very text the key was hashed from."""
    text = SOURCE.read_text()
    return build_library(library_path(spec, text), lambda out, src: nvcc_command(spec, out, src),
                         CutlassError, f"CUTLASS config {spec.name}",
                         {"config": spec.name, "cutlass": cutlass_version()},
                         source=(SOURCE.name, text))


@functools.cache
def _load(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    p, i, f, sz = ctypes.c_void_p, ctypes.c_int, ctypes.c_float, ctypes.c_size_t
    lib.fp8t_gemm.argtypes = [p, p, p, p, i, p, i, i, i, i, i, i, f, f, i, p, sz, p]
    lib.fp8t_gemm.restype = i
    lib.fp8t_workspace_size.argtypes = [i, i, i, i, i]
    lib.fp8t_workspace_size.restype = sz
    lib.fp8t_last_error.restype = ctypes.c_char_p
    lib.fp8t_config.restype = ctypes.c_char_p
    return lib


@functools.cache
def library(spec: BuildSpec) -> ctypes.CDLL:
    """``spec``'s library, built if needed and loaded once per process."""
    return _load(str(build(spec)))


@functools.lru_cache(maxsize=4096)
def _workspace_bytes(spec: BuildSpec, m: int, n: int, k: int, splits: int, mode: int) -> int:
    return library(spec).fp8t_workspace_size(m, n, k, splits, mode)


# ============================================================================ configs


def token_tile(bucket: int) -> int:
    """The narrow (token) tile side for an M bucket: 16, 32 or 64 (FP8 GMMA N >= 8)."""
    return 16 if bucket <= 16 else (32 if bucket <= 32 else 64)


def spec_of(config: dict) -> BuildSpec:
    m, n, k = (int(v) for v in config["tile"].split("x"))
    return BuildSpec(config["sched"], m, n, k, int(config.get("cluster", 1)))


def _configs(p: GemmProblem) -> list[dict]:
    tn = token_tile(p.bucket)
    blockwise = p.scheme is Scheme.BLOCK128
    sched_k, sched_p = ("bk", "bp") if blockwise else ("sk", "pp")
    sk = f"{_TILE_M[sched_k]}x{tn}x128"
    out = [{"sched": sched_k, "tile": sk, "mode": "heuristic", "splits": 1, "pdl": False}]
    tiles = -(-p.n // _TILE_M[sched_k])
    for splits in (2, 3, 4):  # split-K when the N tiles alone leave SMs idle (132 on the H200)
        if tiles * splits <= 2 * 132 and p.k // splits >= 512 and (splits != 3 or blockwise):
            out.append({"sched": sched_k, "tile": sk, "mode": "splitk", "splits": splits, "pdl": False})
    out.append({"sched": sched_p, "tile": f"64x{tn}x128", "mode": "heuristic", "splits": 1,
                "pdl": False})
    if blockwise:  # no blockwise prefetch mainloop (pf); the ping-pong build has griddepcontrol
        out.append({"sched": "bp", "tile": f"64x{tn}x128", "mode": "heuristic", "splits": 1,
                    "pdl": True})
        return out
    # Example 63's defaults (overlap 0.5, prefetch -1) with PDL. Its docs call a prefetch < 0
    # "best effort", but CUTLASS 4.2.0's kernel runs its prefetch warp only for a ratio > 0
    # (should_prefetch), so this config prefetches nothing; a ratio of 1.0 (half the K
    # tiles) ran 0.3-0.5 us slower a GEMM (H200, results/pf_ratios_H200_2026-12-01/call2/).
    out.append({"sched": "pf", "tile": f"64x{tn}x128", "mode": "heuristic", "splits": 1,
                "pdl": True, "overlap": 0.5, "prefetch": -1.0})
    return out


def _default_config(p: GemmProblem) -> dict:
    # pf (example 63 + PDL) was the fastest CUTLASS config on 51 of 72 (shape, M, scheme) rows
    # of benchmarks/results/cutlass_H200_2026-11-30.json (pp 14, sk 7). block128: bp with
    # PDL, unmeasured as a default (the tuner times every config).
    want = ("bp", True) if p.scheme is Scheme.BLOCK128 else ("pf", True)
    return next(c for c in _configs(p) if (c["sched"], c["pdl"]) == want)


def _check(p: GemmProblem) -> str | None:
    if p.capability is None:
        return "needs a CUDA tensor (CUTLASS sm_90a kernels)"
    if p.capability != (9, 0):
        return f"CUTLASS configs are built for sm_90a only, this is sm_{p.capability[0]}{p.capability[1]}"
    if p.scheme not in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128):
        return f"the CUTLASS backend serves per_tensor, channel_token and block128, not {p.scheme.value}"
    if p.out_dtype != torch.bfloat16:
        return f"the CUTLASS epilogue writes bfloat16 only, asked for {p.out_dtype}"
    if p.n % _ALIGN or p.k % _ALIGN:
        return f"CUTLASS TMA needs N and K multiples of {_ALIGN}, got N={p.n}, K={p.k}"
    return None


def _precompile(jobs: list):
    """Build the libraries of [(problem, config), ...] (distinct configs, in parallel)."""
    from concurrent.futures import ThreadPoolExecutor

    specs = sorted({spec_of(c) for _, c in jobs if c is not None}, key=lambda s: s.name)
    todo = [s for s in specs if not library_path(s).is_file()]
    t0 = time.perf_counter()
    workers = build_workers(len(todo))

    def one(s: BuildSpec) -> str | None:
        try:
            build(s)
        except CutlassError as e:
            return str(e)
        return None

    with ThreadPoolExecutor(workers) as pool:
        failures = [f for f in pool.map(one, todo) if f]
    return PrecompileReport(len(specs), len(todo), time.perf_counter() - t0, failures)


@dataclass
class PrecompileReport:
    configs: int
    built: int
    seconds: float
    failures: list[str]

    def summary(self) -> str:
        s = (f"{self.configs} CUTLASS configs, built {self.built - len(self.failures)} of "
             f"{self.built} missing in {self.seconds:.0f} s")
        return s + (f"; failed: {self.failures[0]}" if self.failures else "")


# ============================================================================ run


def block_scales_64(weight: Fp8Weight) -> torch.Tensor:
    """block128's (ceil(N/128), ceil(K/128)) scales as the blockwise builds read them: each
    row twice, cut to ceil(N/64) rows, so row r of the result scales weight rows 64r..64r+63."""
    rows = -(-weight.n // SCALE_ROWS)
    return weight.kernel_scale().repeat_interleave(128 // SCALE_ROWS, dim=0)[:rows].contiguous()


def _tma_ready(t: torch.Tensor) -> torch.Tensor:
    """``t`` contiguous at a 16-byte aligned address (TMA's), copied when it is not: a
    contiguous view at an odd offset stays misaligned under .contiguous()."""
    if t.is_contiguous() and t.data_ptr() % _ALIGN == 0:
        return t
    return t.clone(memory_format=torch.contiguous_format)


def _prepare(weight: Fp8Weight) -> dict:
    w = _tma_ready(weight.data)
    if weight.scheme is Scheme.BLOCK128:
        return {"w": w, "w_scale": block_scales_64(weight), "w_vec": 1}
    scale = weight.scale.float().reshape(-1).contiguous()
    return {"w": w, "w_scale": scale, "w_vec": int(scale.numel() > 1)}


# Workspaces (stream-K / split-K partials), one per (device, stream): two streams never share
# one (they would race). Its raw pointer goes into the launch, so a CUDA graph captured with
# it keeps writing it on every replay: a workspace is never freed. One that grows is retired
# into _RETIRED (kept alive), its replacement at least twice as large (a few retired at most).
_WORKSPACES: dict[tuple, torch.Tensor] = {}
_RETIRED: list[torch.Tensor] = []


def _workspace(device: torch.device, nbytes: int, stream: int = 0) -> torch.Tensor | None:
    """A device buffer of >= nbytes for launches on ``stream`` (its handle) of ``device``,
    reused by every such call and never freed (see _WORKSPACES)."""
    if nbytes == 0:
        return None
    key = (device.type, device.index, stream)
    buf = _WORKSPACES.get(key)
    if buf is None or buf.numel() < nbytes:
        if buf is not None:
            _RETIRED.append(buf)
            nbytes = max(nbytes, 2 * buf.numel())
        buf = torch.empty(nbytes, dtype=torch.uint8, device=device)
        _WORKSPACES[key] = buf
    return buf


def _run(x, weight, packed, *, act_scale=None, bias=None, out_dtype=torch.bfloat16, config=None,
         out=None):
    # the launch (and CUTLASS's cudaFuncSetAttribute) act on the current device: make it x's
    # (the stream is x's); one int compare when it already is
    if other_cuda_device(x):
        with torch.cuda.device(x.device):
            return _run(x, weight, packed, act_scale=act_scale, bias=bias, out_dtype=out_dtype,
                        config=config, out=out)
    if out_dtype != torch.bfloat16:
        raise ValueError(f"the CUTLASS backend writes bfloat16 only, asked for {out_dtype}")
    scheme = weight.scheme
    m, k = x.shape
    n = weight.n
    if k != weight.k:
        raise ValueError(f"x has K={k}, the weight K={weight.k}")
    if out is not None and (out.shape != (m, n) or out.dtype != torch.bfloat16):
        raise ValueError(f"out must be ({m}, {n}) bfloat16, got {tuple(out.shape)} {out.dtype}")
    if bias is not None and bias.numel() != n:
        raise ValueError(f"bias must hold N={n} values, got shape {tuple(bias.shape)}")
    if x.dtype == FP8_DTYPE and act_scale is not None:  # a given scale: its shape, row-major
        act_scale = fp8_act_scale(scheme, act_scale, m, k)
    # Unplanned (the tuner's chain, a captured compiled call), the pre-pass launches without
    # PDL, unlike the plan's (nn/plan._quant_first_plan). Kept: a chain timing it with PDL
    # moved 64-80 of the 27B tower's 128 GEMMs onto CUTLASS in 6 of 9 scheme / M cells, and
    # those steps ran 0.7-4.2% slower, except per_tensor's at M = 32 (0.995x; H100,
    # benchmarks/results/session68_2026-12-07/ab.json).
    xq, sa = act_quant.for_gemm(x, weight, act_scale)
    xq = _tma_ready(xq)
    sa = sa.float().reshape(-1).contiguous()  # block128: (M, ceil(K/128)) row-major, flat
    cfg = config or _default_config(GemmProblem(m, n, k, scheme, capability=(9, 0)))
    spec = spec_of(cfg)
    if (spec.sched in BLOCKWISE) != (scheme is Scheme.BLOCK128):
        raise CutlassError(f"CUTLASS config {spec.name} cannot run {scheme.value}: block128 runs "
                           f"the blockwise schedules ({', '.join(sorted(BLOCKWISE))}) and only it does")
    lib = library(spec)
    mode, splits = MODES[cfg.get("mode", "heuristic")], int(cfg.get("splits", 1))
    ws_bytes = _workspace_bytes(spec, m, n, k, splits, mode)
    stream = torch.cuda.current_stream(xq.device).cuda_stream
    ws = _workspace(xq.device, ws_bytes, stream)
    # out as D when TMA can write it (contiguous, 16-byte aligned) and no bias is added after
    direct = (out is not None and bias is None and out.is_contiguous()
              and out.data_ptr() % _ALIGN == 0)
    y = out if direct else torch.empty(m, n, dtype=torch.bfloat16, device=xq.device)
    rc = lib.fp8t_gemm(
        packed["w"].data_ptr(), xq.data_ptr(), y.data_ptr(),
        packed["w_scale"].data_ptr(), packed["w_vec"], sa.data_ptr(), int(sa.numel() > 1),
        m, n, k, splits, mode, float(cfg.get("overlap", -1.0)), float(cfg.get("prefetch", -1.0)),
        int(bool(cfg.get("pdl", False))), None if ws is None else ws.data_ptr(), ws_bytes, stream,
    )
    if rc != 0:
        raise CutlassError(f"CUTLASS {spec.name} failed on M={m}, N={n}, K={k} "
                           f"(code {rc}): {lib.fp8t_last_error().decode()}")
    if bias is not None:
        y = y + bias.to(y.dtype).reshape(n)
    if out is not None and y is not out:
        out.copy_(y)
        return out
    return y


BACKEND = Backend(
    name="cutlass",
    # Our named CUTLASS kernels (cutlass::device_kernel<fp8tower_cutlass::sk_128x16x128>, as
    # the H200 profiler showed, 2026-11-30; nsys's shortName: "device_kernel" alone), sk's
    # workspace zeroing ("Memset (Device)"), the activation-quant launch (ours in Triton, or
    # aten's ops for a dynamic per-tensor amax: stream.TORCH_ACT_QUANT_KERNELS, with copies),
    # the bias add after the GEMM (aten's CUDAFunctor_add).
    kernel_family=(r"fp8tower_cutlass::|^device_kernel$|^Memset|_fp8_act_quant_kernel|"
                   r"CUDAFunctor_add|" + TORCH_ACT_QUANT_KERNELS),
    description="CUTLASS 3.x sm90 FP8 swap-AB GEMMs (stream-K/split-K, ping-pong, example 63's "
                "early trigger + PDL; block128: blockwise-scaled mainloop), built by nvcc; "
                "separate activation-quant launch",
    unavailable_reason=_unavailable,
    check=_check,
    prepare=_prepare,
    run=_run,
    configs=_configs,
    default_config=_default_config,
    precompile=_precompile,
)
