"""Stream backend: an FP8 decode GEMM resident before its predecessor ends (issue #12).

The kernel (csrc/stream/fp8_stream_gemm.cu) lets the next kernel launch at once, asks TMA
for its first weight tiles, and only then waits for the previous kernel and asks for x;
launched with programmatic dependent launch (config ``pdl``), its start overlaps the
previous kernel. Warp-specialized: a producer warp and two consumer warpgroups, one CTA per
SM; the (128-row tile, 256-wide K step) iterations split by stream-K or whole tiles
(``whole_tiles``, ``min_iters``); split tiles are summed by their last CTA, deterministically.

Weights are stored tile-major (:func:`pack_weight`): a stage is one 32 KB TMA box.

Split tiles: stream-K (a global-memory reduction, the last CTA sums), or a thread block
cluster per tile (config ``cluster``: 2-16 CTAs, reduced through rank 0's distributed shared
memory, sizes whose clusters all fit at once: :func:`cluster_sizes`). The cluster split
(results/cluster_split_H200_2026-12-01/, README there), per_tensor M = 1 against the Triton
default, one shape a chain: 1024x5120 4.72-4.81 / 6.91-6.94 us (with FP8 x given, no
pre-pass: 4.03-4.17), 6144x5120 11.08-11.33 / 11.71-11.84; even on 5120x6144 (11.47-11.77 /
11.64-11.73). After a kernel launched without PDL (an elementwise kernel between GEMMs,
as a model's norms and activations are) it loses what it gains: its pre-pass then runs
alone (1.0-1.4 us, and the GEMM starts after it ends), and its own start is slower than the
Triton kernel's (chains of 8 GEMMs + 8 elementwise kernels, 4 shapes: 104.9-107.4 us against
93.2-94.5; without the elementwise kernels 75.4-76.6 against 82.5-84.2). ``xq`` (x quantized
in the kernel, no pre-pass; per_tensor with a static scale, channel_token) removes the
pre-pass: same bits, 99.1 us in that chain at M = 1, but its division per element makes it
slower from M = 8 on (5120x6144: 16.8 us at M = 8, 23.5 at M = 16).

Measured (H200 2026-12-01, results/tile_major_H200_2026-12-01/call5/stream.json, per_tensor
M = 1, us, against the Triton default): correct everywhere; ahead on 16384x5120 (22.21 /
22.73) and 14336x5120 (19.95 / 20.43), even on 34816x5120 (48.47 / 48.38) and 1024x5120
(6.96 / 6.92), behind on 5120x6144 and 5120x17408 (13.68 / 11.92, 28.36 / 25.59); with a
small elementwise kernel between GEMMs (as in a model) its chain ran 341.5 us against 296.0
(its x pre-pass launch then runs alone). The merged 27B tower: 0.88-0.93x of auto
(results/stream_H200_2026-12-01/ws/; tile_major_H200_2026-12-01/README.md, call 1). So ``auto`` does not time it
(tuning/search.TUNING_EXCLUDED); ``backend="stream"`` serves it.

Serves M <= 16, per_tensor, channel_token and block128: FP8 x from the one-launch activation
pre-pass (itself launched with PDL, so the GEMM streams its weights while the pre-pass runs)
or given (or bf16 x quantized in the kernel: ``xq``); bfloat16 output, K a multiple of 16.
Weights and FP8 x come by TMA, the MMAs are FP8 wgmma. Built by nvcc into one shared
library (all variants), cached like the CUTLASS ones.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import paths
from ..formats import FP8_DTYPE, Fp8Weight, Scheme
from ..kernels.configs import H200_SMS
from ..kernels.layout import tile_major
from ..problem import GemmProblem
from . import Backend, other_cuda_device
from .act_quant import quantize as quantize_act
from .nvcc import build_library, nvcc_env_key, nvcc_path, nvcc_version, sm90a_unavailable

SOURCE = Path(__file__).parent / "csrc" / "stream" / "fp8_stream_gemm.cu"
# -Xptxas -v: the build's sidecar JSON keeps ptxas's per-variant registers, spills and
# static shared memory (checked against STATIC_SMEM by tests/test_stream_backend.py).
NVCC_FLAGS = ("-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC",
              "-gencode", "arch=compute_90a,code=sm_90a", "-DNDEBUG", "-Xptxas", "-v")
MAX_M = 16
STAGES = (4, 6)
# The kernel's x kinds (XK template parameter, see the .cu file).
XK_FP8_TENSOR, XK_FP8_TOKEN, XK_FP8_BLOCK = 1, 2, 3
_XK = {Scheme.PER_TENSOR: XK_FP8_TENSOR, Scheme.CHANNEL_TOKEN: XK_FP8_TOKEN,
       Scheme.BLOCK128: XK_FP8_BLOCK}


class StreamError(RuntimeError):
    """The stream library failed to build or a launch failed (tuning records it, moves on)."""


def build_unavailable() -> str | None:
    if nvcc_path() is None:
        return "no CUDA compiler: nvcc is not on PATH (nor in $CUDA_HOME/bin)"
    return None


def _unavailable() -> str | None:
    return sm90a_unavailable(build_unavailable())


def library_path(source: str | None = None) -> Path:
    """The library's place in the disk cache, keyed by ``source`` (the .cu text; read from
    SOURCE when None), the flags (NVCC_APPEND/PREPEND_FLAGS too) and nvcc's version."""
    reason = build_unavailable()
    if reason is not None:
        raise StreamError(f"cannot build the stream kernel: {reason}")
    text = SOURCE.read_text() if source is None else source
    h = hashlib.sha256()
    for part in (text, *NVCC_FLAGS, nvcc_version(nvcc_path()), nvcc_env_key()):
        h.update(part.encode())
        h.update(b"\0")
    return paths.cache_dir() / "stream" / f"fp8_stream_gemm-{h.hexdigest()[:16]}.so"


def build() -> Path:
    # nvcc compiles a copy of the text that was hashed (an edit of SOURCE in between cannot
    # land under the old key)
    text = SOURCE.read_text()
    return build_library(library_path(text),
                         lambda out, src: [nvcc_path(), *NVCC_FLAGS, str(src), "-o", str(out)],
                         StreamError, "the stream kernel", {"source": SOURCE.name},
                         source=(SOURCE.name, text))


@functools.cache
def library() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(build()))
    p, i = ctypes.c_void_p, ctypes.c_int
    lib.fp8t_stream_gemm.argtypes = [p, p, p, p, p, p, p, p, i, i, i, i, i, i, i, i, i, i, i, i, i, i, p]
    lib.fp8t_stream_gemm.restype = i
    lib.fp8t_stream_iters.argtypes = [i, i]
    lib.fp8t_stream_iters.restype = ctypes.c_longlong
    lib.fp8t_stream_workspace.argtypes = [i, i]
    lib.fp8t_stream_workspace.restype = ctypes.c_size_t
    lib.fp8t_stream_smem.argtypes = [i, i, i, i, i]
    lib.fp8t_stream_smem.restype = i
    lib.fp8t_stream_max_clusters.argtypes = [i, i, i, i]
    lib.fp8t_stream_max_clusters.restype = i
    lib.fp8t_stream_static_smem.argtypes = [i, i, i]
    lib.fp8t_stream_static_smem.restype = i
    lib.fp8t_stream_last_error.restype = ctypes.c_char_p
    return lib


# Mirrors of the kernel's sizes (the configs are chosen without loading the library).
_BN, _BK, _WSTAGE = 128, 256, 128 * 256


def tiles(n: int) -> int:
    return -(-n // _BN)


def iters(n: int, k: int) -> int:
    return tiles(n) * -(-k // _BK)


def smem_bytes(m: int, xk: int, stages: int, cluster: int = 1, xq_steps: int = 0) -> int:
    """Dynamic shared memory of one CTA (fp8t_stream_smem): stages of 1024-byte multiples
    (W's two TMA boxes, x's two, block128's scales), the cluster split's reduction area (one
    fp32 partial of the 128-row tile per other rank), xq's quantized x (two boxes a K step)
    + 1024 bytes of alignment slack."""
    x_box = (8 if m <= 8 else 16) * 128
    stage = -(-(_WSTAGE + 2 * x_box + (144 if xk == XK_FP8_BLOCK else 0)) // 1024) * 1024
    red = (cluster - 1) * _BN * (8 if m <= 8 else 16) * 4 if cluster > 1 else 0
    return stages * stage + red + 2 * x_box * xq_steps + 1024


def xq_steps(k: int, cluster: int) -> int:
    """K steps of x a rank quantizes (xq): the longest of the cluster's ranges."""
    steps = -(-k // _BK)
    return -(-steps // cluster)


def _x_kind(p: GemmProblem) -> int:
    return _XK[p.scheme]


# ============================================================================ configs


SMALL_ITERS = 8 * H200_SMS  # below: also grids of >= 4 iterations a CTA (fewer split tiles)


# A CTA's dynamic + static shared memory must fit the per-block opt-in limit
# (cudaDevAttrMaxSharedMemoryPerBlockOptin: 232448 B = 227 KB on the H100/H200; the SM's
# 228 KB less the 1 KB the driver reserves per block). Dynamic sizes are multiples of 1024,
# so a CTA of exactly 232448 dynamic bytes never launches ("cudaFuncSetAttribute(232448
# bytes): invalid argument", H200 2026-12-01, results/cluster_split_H200_2026-12-01/call2/).
SMEM_OPTIN = 232_448
# Static shared memory of each variant (NT, STAGES, XK) -> bytes, by `nvcc -Xptxas -v`
# (nvcc 13.0, sm_90a, 2026-12-05): the mbarriers (16 B a stage), s_flag, and channel_token's
# s_xs (64 B). The build's sidecar JSON must agree (tests/test_stream_backend.py), and so
# must the loaded module (fp8t_stream_static_smem, tests/test_gpu_cuda_backends.py).
STATIC_SMEM = {(nt, stages, xk): 16 * stages + 16 + (64 if xk == XK_FP8_TOKEN else 0)
               for nt in (1, 2) for stages in STAGES for xk in (1, 2, 3)}
_STATIC_SMEM_UNKNOWN = 1024  # a variant not built (other stages): a conservative reserve


def static_smem(m: int, xk: int, stages: int) -> int:
    """Static shared memory bytes of the variant serving M tokens (STATIC_SMEM)."""
    return STATIC_SMEM.get((1 if m <= 8 else 2, stages, xk), _STATIC_SMEM_UNKNOWN)


def fits(m: int, xk: int, stages: int, cluster: int = 1, steps: int = 0) -> bool:
    """One CTA of ``stages`` stages (+ ``steps`` K steps of xq's x), its static shared
    memory included, fits the per-block limit (the kernel runs one CTA per SM)."""
    return smem_bytes(m, xk, stages, cluster, steps) + static_smem(m, xk, stages) <= SMEM_OPTIN


MAX_CLUSTER = 16  # CTAs a cluster; 9-16 are "non-portable" (the kernel allows them)
# Clusters of one CTA an SM resident at once on the H200, by size (cudaOccupancyMaxActiveClusters,
# stream.max_clusters; results/cluster_split_H200_2026-12-01/call2/stream.json): packing them
# into GPCs leaves SMs idle (3 x 39 = 117, 16 x 7 = 112 of 132). A grid of more clusters runs
# a second wave: 5120x6144 (40 tiles) in clusters of 3 took 15.10 us at M = 1 against 11.73
# for the Triton default, 1024x5120 in clusters of 16 8.03 against 4.76 in clusters of 8.
H200_RESIDENT_CLUSTERS = {2: 66, 3: 39, 4: 30, 8: 15, 16: 7}


def cluster_sizes(n: int, k: int) -> list[int]:
    """Cluster splits worth timing, ascending: the two largest sizes whose clusters (one a
    tile) are all resident at once on the H200 and that leave every CTA a K step."""
    t, steps = tiles(n), -(-k // _BK)
    ok = [c for c, resident in sorted(H200_RESIDENT_CLUSTERS.items()) if t <= resident and c <= steps]
    return ok[-2:]


def max_clusters(m: int, xk: int, stages: int, cluster: int) -> int:
    """Clusters of this launch resident on the current GPU at once (the CUDA occupancy query:
    packing clusters into GPCs can leave SMs idle)."""
    n = library().fp8t_stream_max_clusters(m, xk, stages, cluster)
    if n < 0:
        raise StreamError(f"cluster occupancy query failed: {library().fp8t_stream_last_error().decode()}")
    return n


def _work_splits(p: GemmProblem) -> list[dict]:
    """How the grid splits the work: stream-K (even, tiles split between CTAs), whole tiles
    (no split tile, uneven counts), and for small problems stream-K with >= 4 steps a CTA."""
    out = [{}, {"whole_tiles": True}]
    if iters(p.n, p.k) < SMALL_ITERS:
        out.append({"min_iters": 4})
    return out


XQ_SCHEMES = (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN)  # x quantized in the kernel (xq)


def _configs(p: GemmProblem) -> list[dict]:
    """Stages x PDL x work split, where a CTA fits in shared memory; cluster splits with PDL,
    with the pre-pass or (per_tensor with a static scale, channel_token) x quantized in the
    kernel (``xq``)."""
    xk, m = _x_kind(p), min(p.bucket, MAX_M)
    out = [{"stages": s, "pdl": pdl, **w}
           for s in STAGES for pdl in (True, False) for w in _work_splits(p) if fits(m, xk, s)]
    xqs = (False, True) if _xq_serves(p.scheme, p.static_act_scale) else (False,)
    return out + [{"stages": s, "pdl": True, "cluster": c, **({"xq": True} if xq else {})}
                  for c in cluster_sizes(p.n, p.k) for xq in xqs for s in STAGES
                  if fits(m, xk, s, c, xq_steps(p.k, c) if xq else 0)]


def _xq_serves(scheme: Scheme, static_scale: bool) -> bool:
    return scheme is Scheme.CHANNEL_TOKEN or (scheme is Scheme.PER_TENSOR and static_scale)


WHOLE_TILES_MAX_STEPS = 32  # K / 256: longer rows amortize a split tile's reduction
WHOLE_TILES_MIN = 32  # fewer tiles: too few SMs streaming


def _default_config(p: GemmProblem) -> dict:
    """H200 2026-12-01 (results/stream_H200_2026-12-01/ws/, per_tensor M=1, us): 6 stages
    (the most that fit), PDL on (without it 16384x5120 ran 30.9 instead of 22.8). Whole
    tiles (no split tile) where K <= 8192 and there are >= 32 tiles with no small last
    round: 6144x5120 12.33 against 14.44 with stream-K, 5120x6144 13.75 / 14.47, 10240x5120
    17.32 / 19.33, 12288x5120 18.56 / 21.66 (a split tile's reduction stalls its CTAs'
    weight streams). Long rows amortize the reduction and need every SM (5120x17408:
    stream-K 28.69, whole tiles 32.62); so do grids with a small last round (34816x5120:
    272 tiles = 2 x 132 + 8, stream-K 48.97). Few tiles: stream-K with >= 4 steps a CTA
    (1024x5120: 6.89).

    Where clusters of 2-16 CTAs a tile all fit at once (cluster_sizes) and K <= 8192 (long
    rows, not measured with clusters, keep stream-K): the largest, on the most stages that
    fit (results/cluster_split_H200_2026-12-01/call3/stream.json, M = 1, us, against the
    stream-K / whole-tile default): per_tensor 1024x5120 4.72 / 6.92, 5120x6144 11.47 /
    13.83, 4096x4096 7.91 / 9.51, 6144x5120 11.08 / 12.10; block128 5.56 / 7.68, 13.69 /
    17.23, 9.68 / 12.10, 13.40 / 15.12."""
    sizes = cluster_sizes(p.n, p.k)
    steps = -(-p.k // _BK)
    if sizes and steps <= WHOLE_TILES_MAX_STEPS:
        m, xk = min(p.bucket, MAX_M), _x_kind(p)
        stages = max((s for s in STAGES if fits(m, xk, s, sizes[-1])), default=None)
        if stages is not None:
            return {"stages": stages, "pdl": True, "cluster": sizes[-1]}
    t = tiles(p.n)
    grid = min(t, H200_SMS)
    r = t % grid
    if t >= WHOLE_TILES_MIN and steps <= WHOLE_TILES_MAX_STEPS and (r == 0 or r >= grid // 2):
        split = {"whole_tiles": True}
    else:
        split = {"min_iters": 4} if iters(p.n, p.k) < SMALL_ITERS else {}
    return {"stages": STAGES[-1], "pdl": True, **split}


def _check(p: GemmProblem) -> str | None:
    if p.capability is None:
        return "needs a CUDA tensor (an sm_90a kernel)"
    if p.capability != (9, 0):
        return f"built for sm_90a only, this is sm_{p.capability[0]}{p.capability[1]}"
    if p.scheme not in _XK:
        return f"serves per_tensor, channel_token and block128, not {p.scheme.value}"
    if p.m > MAX_M:
        return f"serves M <= {MAX_M} (decode), got M={p.m}"
    if p.out_dtype != torch.bfloat16:
        return f"writes bfloat16 only, asked for {p.out_dtype}"
    if p.k % 16:
        return f"needs K a multiple of 16 (16-byte weight rows), got K={p.k}"
    return None


@dataclass
class PrecompileReport:
    built: bool
    seconds: float
    failures: list[str]

    def summary(self) -> str:
        if self.failures:
            return f"stream kernel: build failed: {self.failures[0]}"
        return f"stream kernel: {'built' if self.built else 'cached'} in {self.seconds:.0f} s"


def _precompile(jobs: list) -> PrecompileReport:
    """Build the one library (every variant) ahead of tuning."""
    t0 = time.perf_counter()
    try:
        missing = not library_path().is_file()
        build()
    except StreamError as e:
        return PrecompileReport(False, time.perf_counter() - t0, [str(e)])
    return PrecompileReport(missing, time.perf_counter() - t0, [])


# ============================================================================ run


def pack_weight(w: torch.Tensor) -> torch.Tensor:
    """W (N, K) FP8 -> tile-major bytes (tiles * kb * 256, 128): 128-row x 128-byte blocks,
    each 128-row tile's in K order, K padded to whole 256-wide steps, so that a stage (one
    tile's 256-wide K step, 32 KB) is one contiguous TMA box."""
    return tile_major(w.view(torch.uint8), _BN, 128, k_multiple=_BK)


def _prepare(weight: Fp8Weight) -> dict:
    return {"w": pack_weight(weight.data), "ws": weight.kernel_scale().contiguous(),
            "counters": None}


@functools.cache
def _sms(index: int) -> int:
    return torch.cuda.get_device_properties(index).multi_processor_count


def _counters(packed: dict, n: int, device: torch.device) -> torch.Tensor:
    c = packed["counters"]
    if c is None or c.numel() < tiles(n):
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("the stream kernel's split-tile counters must be allocated before "
                               "CUDA graph capture: run the layer once eagerly first")
        c = torch.zeros(tiles(n), dtype=torch.int32, device=device)
        packed["counters"] = c
    return c


def _aligned(t: torch.Tensor) -> bool:
    return t.data_ptr() % 16 == 0 and t.stride(-1) == 1


def fp8_act_scale(scheme: Scheme, scale: torch.Tensor, m: int, k: int) -> torch.Tensor:
    """The scale of a given FP8 x (M, K) as the kernels read it: float32, contiguous (a
    column-major block128 scale, stride (1, M), would be read transposed), of the scheme's
    shape: per_tensor one element, channel_token (M,) or (M, 1), block128 (M, ceil(K/128))
    (what the activation pre-pass returns); else a ValueError naming the shape (a 0-dim
    channel_token scale at M > 1 would be read past its end)."""
    shape = scale.shape
    if scheme is Scheme.PER_TENSOR:
        ok = scale.numel() == 1
    elif scheme is Scheme.CHANNEL_TOKEN:
        ok = shape == (m,) or shape == (m, 1)
    else:
        ok = shape == (m, -(-k // 128))
    if not ok:
        want = {Scheme.PER_TENSOR: "one element",
                Scheme.CHANNEL_TOKEN: f"shape ({m},) or ({m}, 1), one a token"}.get(
                    scheme, f"shape ({m}, {-(-k // 128)}), one per token and 128 of K")
        raise ValueError(f"{scheme.value} FP8 x of shape ({m}, {k}) needs an act_scale of {want}, "
                         f"got shape {tuple(shape)}")
    if scale.dtype != torch.float32:
        scale = scale.float()
    return scale if scale.is_contiguous() else scale.contiguous()


def _run(x, weight, packed, *, act_scale=None, bias=None, out_dtype=torch.bfloat16, config=None,
         out=None):
    # cudaFuncSetAttribute and the launch act on the current device: make it x's (the stream
    # is x's); one int compare when it already is
    if other_cuda_device(x):
        with torch.cuda.device(x.device):
            return _run(x, weight, packed, act_scale=act_scale, bias=bias, out_dtype=out_dtype,
                        config=config, out=out)
    if out_dtype != torch.bfloat16:
        raise ValueError(f"the stream backend writes bfloat16 only, asked for {out_dtype}")
    scheme = weight.scheme
    m, k = x.shape
    n = weight.n
    if m > MAX_M:
        raise ValueError(f"the stream backend serves M <= {MAX_M}, got M={m}")
    cfg = config or _default_config(GemmProblem(m, n, k, scheme, capability=(9, 0)))
    pdl = bool(cfg.get("pdl", True))
    cluster, steps = int(cfg.get("cluster", 1)), -(-k // _BK)
    if cluster != 1 and (not 2 <= cluster <= min(MAX_CLUSTER, steps) or cfg.get("whole_tiles")):
        raise ValueError(f"cluster={cluster}: expected 2..{min(MAX_CLUSTER, steps)} CTAs a tile "
                         f"(at most {MAX_CLUSTER} and the {steps} K steps of 256), without whole_tiles")
    if cfg.get("xq") and (cluster == 1 or scheme not in XQ_SCHEMES):
        raise ValueError(f"xq (x quantized in the kernel) takes a cluster split and per_tensor or "
                         f"channel_token, got cluster={cluster}, {scheme.value}")
    ws, ws_ld, xs_ld = packed["ws"], 0, 0
    xk = _XK[scheme]
    static = act_scale if act_scale is not None else weight.act_scale
    # xq where its kernel path serves this x: bfloat16 (else the pre-pass, same numbers)
    xq = bool(cfg.get("xq")) and x.dtype == torch.bfloat16 and (
        scheme is Scheme.CHANNEL_TOKEN or static is not None)
    if xq:
        # per_tensor: its static scale; channel_token: the kernel computes the scales (xs unread)
        xs = static.float().reshape(1).contiguous() if scheme is Scheme.PER_TENSOR else ws
    elif x.dtype == FP8_DTYPE:
        if act_scale is None:
            raise ValueError("FP8 activations need their act_scale")
        xs = fp8_act_scale(scheme, act_scale, m, k)
    else:  # the one-launch pre-pass (per-tensor static / per-token / 1x128), itself PDL
        x, xs = quantize_act(x, scheme, static if scheme is Scheme.PER_TENSOR else None, pdl=pdl)
        xs = xs.float().contiguous()
    if xk == XK_FP8_TOKEN and not xq:
        xs_ld = 1  # (M,) or (M, 1), contiguous
    if xk == XK_FP8_BLOCK:
        xs_ld, ws_ld = xs.stride(0), ws.stride(0)
    # x's tensor map (and xq's 16-byte loads) need a 16-byte aligned base and rows (xq: bf16
    # rows of 8k elements); x.contiguous() would keep a misaligned contiguous view: a copy
    if not (_aligned(x) and x.stride(0) % (8 if xq else 16) == 0):
        x = x.clone(memory_format=torch.contiguous_format)
    y = _out_buffer(out, m, n, x.device)
    if bias is not None:
        if bias.numel() != n:
            raise ValueError(f"bias must hold N={n} values, got shape {tuple(bias.shape)}")
        bias = bias.to(torch.bfloat16).reshape(n).contiguous()
    lib = library()
    dev = x.device
    sms = _sms(dev.index if dev.index is not None else torch.cuda.current_device())
    whole = bool(cfg.get("whole_tiles", False))
    if cluster > 1:  # a cluster per tile, its CTAs co-resident (several waves if they must)
        grid = tiles(n) * cluster
    else:
        units = tiles(n) if whole else -(-iters(n, k) // int(cfg.get("min_iters", 1)))
        grid = min(units, sms)  # one CTA per SM: its ring takes the shared memory
    part = torch.empty(lib.fp8t_stream_workspace(m, 1 if cluster > 1 else grid), dtype=torch.uint8,
                       device=dev)  # (a cluster split reduces in shared memory)
    counters = _counters(packed, n, dev)
    rc = lib.fp8t_stream_gemm(
        packed["w"].data_ptr(), x.data_ptr(), y.data_ptr(), ws.data_ptr(), xs.data_ptr(),
        None if bias is None else bias.data_ptr(), part.data_ptr(), counters.data_ptr(),
        m, n, k, x.stride(0), y.stride(0), ws_ld, xs_ld, xk,
        int(cfg.get("stages", 4)), grid, int(pdl), int(whole), cluster, int(xq),
        torch.cuda.current_stream(dev).cuda_stream,
    )
    if rc != 0:
        raise StreamError(f"stream GEMM failed on M={m}, N={n}, K={k} (code {rc}): "
                          f"{lib.fp8t_stream_last_error().decode()}")
    if out is not None and y is not out:
        return out.copy_(y)
    return y


def _out_buffer(out: torch.Tensor | None, m: int, n: int, device: torch.device) -> torch.Tensor:
    """Where the kernel writes y: ``out`` when it is (M, N) bfloat16 with unit column stride,
    rows >= N apart and a 16-byte aligned base; a temporary (copied into ``out`` after the
    launch) when only its layout differs; a ValueError when its shape or dtype does."""
    if out is None:
        return torch.empty(m, n, dtype=torch.bfloat16, device=device)
    if out.shape != (m, n) or out.dtype != torch.bfloat16:
        raise ValueError(f"out must be ({m}, {n}) bfloat16, got {tuple(out.shape)} {out.dtype}")
    if _aligned(out) and (m == 1 or out.stride(0) >= n):
        return out
    return torch.empty(m, n, dtype=torch.bfloat16, device=device)


# aten kernels of the torch activation-quant math (a dynamic per-tensor scale needs a global
# amax first: formats.quantize_act_per_tensor's abs, amax, divisions, clamps and FP8 cast) and
# of the copies a backend makes (casts, misaligned x or out: copy kernels or a D2D memcpy),
# named by their functors as the profiler (and nsys's demangledName) shows them: not every
# elementwise or reduction kernel (a norm, an activation). torch 2.11 on the H200 (2026-12-05,
# tests/test_gpu_cuda_backends.py::test_kernel_family_matches_the_profiled_kernels): AbsFunctor,
# MaxNanFunctor (amax), DivFunctor, launch_clamp_scalar's lambda (ClampScalarFunctor in other
# torch versions), direct/bfloat16/float8 copy_kernel_cuda, "Memcpy DtoD (Device -> Device)".
# nsys's shortName drops the functor ("reduce_kernel"): such a trace cannot attribute these
# kernels to a backend, and reports them as mismatches.
TORCH_ACT_QUANT_KERNELS = (r"AbsFunctor|MaxNanFunctor|DivFunctor|ClampScalarFunctor|"
                           r"launch_clamp_scalar|copy_kernel|FillFunctor|^Memcpy DtoD")

BACKEND = Backend(
    name="stream",
    # The GEMM, the activation pre-pass (Triton, one launch), the torch quant math of a
    # dynamic per-tensor scale, copies, the first call's counter zeroing (FillFunctor).
    kernel_family=r"fp8t_stream_gemm|_fp8_act_quant_kernel|" + TORCH_ACT_QUANT_KERNELS,
    description="fp8tower's CUDA decode GEMM that streams its weights before waiting for the "
                "previous kernel (PDL, TMA, warp-specialized FP8 wgmma), M <= 16; experimental: "
                "only when named, auto does not time it",
    unavailable_reason=_unavailable,
    check=_check,
    prepare=_prepare,
    run=_run,
    configs=_configs,
    default_config=_default_config,
    precompile=_precompile,
)
