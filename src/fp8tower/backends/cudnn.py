"""cuDNN backend: an FP8 matmul graph of the cuDNN frontend (``nvidia-cudnn-frontend``).

Graph, per (device, M, N, K, scale layout, out dtype): x FP8 (1, M, K) row-major from a
separate activation-quant launch (``act_quant.quantize``, as cuBLASLt's path), W FP8 (N, K)
row-major described as (1, K, N) with strides (N*K, 1, K), i.e. used transposed in place; the
fp32 product is scaled by two pointwise multiplies: the activation scale (a scalar, or the
(1, M, 1) token vector of channel_token) and the weight scale (a scalar, or the (1, 1, N)
channel vector), and written as bf16/fp16.

Graphs are shape-static, so one is built per exact M (padding M up to its bucket would cost a
copy launch per call); its heuristics list (modes A, then FALLBACK) gives the plans. A kernel
config is ``{"plan": i}``, the i-th entry of that list (the first ``MAX_PLANS`` that build
are the tuning candidates); a plan is built once and cached with its graph. Tuning happens at
the bucket's M; another M of the bucket runs the same index, or the next one that builds
there (cuDNN's own ``build_plans`` walk, wrapping to the list's start; :func:`plan_run` says
which).

The package is imported lazily; without it (or a CUDA GPU) the backend is registered and
unavailable, with the reason. One workspace per plan: calls on concurrent streams must not
share a graph (the eager path and CUDA graphs run one stream).
"""

from __future__ import annotations

import functools
import importlib.util
import threading
from dataclasses import dataclass, field
from typing import Any

import torch

from ..formats import FP8_DTYPE, Fp8Weight, Scheme
from ..problem import GemmProblem
from . import Backend, BackendError, act_quant

PACKAGE = "nvidia-cudnn-frontend"
# FP8 operands: 16-byte aligned rows of K, and N a multiple of 16 (the cuBLASLt rule too).
_ALIGN = 16
# Tuning candidates: the first this many heuristics plans that build.
MAX_PLANS = 4
_OUT_DTYPES = (torch.bfloat16, torch.float16)
_ACT_DTYPES = (torch.bfloat16, torch.float16)
# Variant-pack uids of the graph's five operands.
_X, _W, _SA, _SB, _Y = 1, 2, 3, 4, 5


@functools.lru_cache(maxsize=1)
def _unavailable() -> str | None:
    if importlib.util.find_spec("cudnn") is None:
        return f"needs the cuDNN frontend Python package ({PACKAGE}; extra 'fp8tower[cudnn]')"
    if not torch.cuda.is_available():
        return "needs a CUDA GPU (cuDNN)"
    cap = torch.cuda.get_device_capability()
    if cap < (8, 9):
        return f"FP8 matmuls need compute capability >= 8.9, got {cap}"
    try:
        cudnn = _cudnn()
        version = int(cudnn.backend_version())
    except (ImportError, OSError, RuntimeError) as e:  # the package without its library
        return f"the cuDNN frontend could not load the cuDNN library: {type(e).__name__}: {e}"
    if version < 90000:
        return f"FP8 matmul graphs need cuDNN >= 9.0, the loaded library is {version}"
    return None


def _cudnn():
    import cudnn

    return cudnn


def versions() -> dict[str, str]:
    """cuDNN library and frontend versions (for benchmark provenance); empty if unavailable."""
    if _unavailable() is not None:
        return {}
    cudnn = _cudnn()
    return {"cudnn": str(cudnn.backend_version_string()), "cudnn_frontend": cudnn.__version__}


# ----------------------------------------------------------------------------- graph cache


def scale_layout(problem: GemmProblem) -> tuple[str, str]:
    """(activation scale, weight scale) kinds: 'tensor' / 'token', 'tensor' / 'channel'."""
    act = "token" if problem.scheme is Scheme.CHANNEL_TOKEN else "tensor"
    chan = problem.scheme is Scheme.CHANNEL_TOKEN or problem.channel_weight_scale
    return act, "channel" if chan else "tensor"


def graph_key(problem: GemmProblem, device_index: int) -> tuple:
    """What one built graph serves: device, exact M, N, K, scale layout, output dtype.

    Activation dtype is absent on purpose: bf16, fp16 and FP8 inputs all reach the graph as
    FP8 (the quant launch comes first). The plan index is the second level (GraphEntry.built).
    """
    act, wt = scale_layout(problem)
    return (device_index, problem.m, problem.n, problem.k, act, wt, problem.out_dtype)


def plan_key(problem: GemmProblem, device_index: int, plan: int) -> tuple:
    """A built plan's cache key: its graph's key and its index in the heuristics list."""
    return (*graph_key(problem, device_index), plan)


@dataclass
class GraphEntry:
    graph: Any = None
    declined: str | None = None  # why cuDNN cannot serve the graph at all
    n_plans: int = 0
    built: dict[int, str | None] = field(default_factory=dict)  # index -> None | error
    names: dict[int, str] = field(default_factory=dict)
    workspaces: dict[int, torch.Tensor] = field(default_factory=dict)

    def buildable(self, limit: int) -> list[int]:
        """Indices (in list order) of the first ``limit`` plans that built."""
        return [i for i, err in sorted(self.built.items()) if err is None][:limit]


_GRAPHS: dict[tuple, GraphEntry] = {}
_HANDLES: dict[int, Any] = {}
_LOCK = threading.RLock()


def _declines():
    cudnn = _cudnn()
    # A graph or plan cuDNN will not serve: the frontend's "not supported" type, and the
    # RuntimeError its bindings raise for other cuDNN statuses at build time.
    return (cudnn.cudnnGraphNotSupportedError, NotImplementedError, RuntimeError)


def _handle(device_index: int):
    h = _HANDLES.get(device_index)
    if h is None:
        with torch.cuda.device(device_index):
            h = _HANDLES[device_index] = _cudnn().create_handle()
    return h


def _dtype(cudnn, dtype: torch.dtype):
    return {torch.bfloat16: cudnn.data_type.BFLOAT16, torch.float16: cudnn.data_type.HALF}[dtype]


def _build_graph(problem: GemmProblem, device_index: int) -> GraphEntry:
    cudnn = _cudnn()
    m, n, k = problem.m, problem.n, problem.k
    act, wt = scale_layout(problem)
    f32 = cudnn.data_type.FLOAT
    g = cudnn.pygraph(
        io_data_type=_dtype(cudnn, problem.out_dtype), intermediate_data_type=f32,
        compute_data_type=f32, handle=_handle(device_index),
    )
    fp8 = cudnn.data_type.FP8_E4M3
    x = g.tensor(name="x", dim=[1, m, k], stride=[m * k, k, 1], data_type=fp8, uid=_X)
    w = g.tensor(name="w", dim=[1, k, n], stride=[n * k, 1, k], data_type=fp8, uid=_W)
    sa_dim = [1, m, 1] if act == "token" else [1, 1, 1]
    sb_dim = [1, 1, n] if wt == "channel" else [1, 1, 1]
    sa = g.tensor(name="scale_a", dim=sa_dim, stride=[sa_dim[1], 1, 1], data_type=f32, uid=_SA)
    sb = g.tensor(name="scale_b", dim=sb_dim, stride=[sb_dim[2], sb_dim[2], 1], data_type=f32,
                  uid=_SB)
    acc = g.matmul(x, w, compute_data_type=f32, name="mm")
    acc.set_data_type(f32)
    scaled = g.mul(a=acc, b=sa, compute_data_type=f32, name="scale_a")
    scaled.set_data_type(f32)
    y = g.mul(a=scaled, b=sb, compute_data_type=f32, name="scale_b")
    y.set_output(True).set_data_type(_dtype(cudnn, problem.out_dtype)).set_uid(_Y)
    entry = GraphEntry(graph=g)
    try:
        g.validate()
        g.build_operation_graph()
        g.create_execution_plans([cudnn.heur_mode.A, cudnn.heur_mode.FALLBACK])
        g.check_support()
    except _declines() as e:
        entry.declined = f"cuDNN declined the {m}x{n}x{k} FP8 graph: {type(e).__name__}: {e}"
        return entry
    entry.n_plans = g.get_execution_plan_count()
    return entry


def _graph(problem: GemmProblem, device_index: int) -> GraphEntry:
    key = graph_key(problem, device_index)
    entry = _GRAPHS.get(key)
    if entry is None:
        with _LOCK:
            entry = _GRAPHS.get(key)
            if entry is None:
                entry = _GRAPHS[key] = _build_graph(problem, device_index)
    return entry


def _build_plan(entry: GraphEntry, index: int, device_index: int) -> str | None:
    """Build plan ``index`` once; None when it built, else why not."""
    if index in entry.built:
        return entry.built[index]
    with _LOCK:
        if index in entry.built:
            return entry.built[index]
        g = entry.graph
        try:
            g.build_plan_at_index(index)
            entry.names[index] = str(g.get_plan_name_at_index(index))
            size = int(g.get_workspace_size_plan_at_index(index))
        except _declines() as e:
            entry.built[index] = f"{type(e).__name__}: {e}"[:300]
            return entry.built[index]
        entry.workspaces[index] = torch.empty(
            max(size, 1), dtype=torch.uint8, device=torch.device("cuda", device_index))
        entry.built[index] = None
        return None


def _probe(problem: GemmProblem, device_index: int, limit: int | None = None) -> GraphEntry:
    """The graph of ``problem`` with (up to) its first ``limit`` (MAX_PLANS) buildable plans."""
    limit = MAX_PLANS if limit is None else limit
    entry = _graph(problem, device_index)
    if entry.declined is None:
        i = 0
        while len(entry.buildable(limit)) < limit and i < entry.n_plans:
            _build_plan(entry, i, device_index)
            i += 1
    return entry


def plan_names(problem: GemmProblem) -> dict[int, str]:
    """Index -> cuDNN plan (engine + knobs) name of the tuning candidates (GPU only)."""
    entry = _probe(problem, torch.cuda.current_device())
    return {i: entry.names[i] for i in entry.buildable(MAX_PLANS)}


# ----------------------------------------------------------------------------- contract


def _check(p: GemmProblem) -> str | None:
    if p.capability is None:
        return "needs a CUDA tensor (cuDNN)"
    if p.capability < (8, 9):
        return f"FP8 matmuls need compute capability >= 8.9, got {p.capability}"
    if p.scheme not in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN):
        return f"the cuDNN backend serves per_tensor and channel_token, not {p.scheme.value}"
    if p.act_dtype not in _ACT_DTYPES and not (
        p.act_dtype == FP8_DTYPE and p.scheme is Scheme.PER_TENSOR
    ):
        return f"activations must be bfloat16 or float16 (or FP8 per_tensor), got {p.act_dtype}"
    if p.out_dtype not in _OUT_DTYPES:
        return f"output must be bfloat16 or float16, got {p.out_dtype}"
    if p.n % _ALIGN or p.k % _ALIGN:
        return f"cuDNN FP8 matmuls need N and K multiples of {_ALIGN}, got N={p.n}, K={p.k}"
    if _unavailable() is None:  # ask cuDNN itself (once per graph key)
        entry = _probe(p, torch.cuda.current_device())
        if entry.declined is not None:
            return entry.declined
        if not entry.buildable(1):
            return f"no cuDNN plan builds for {p.key()} ({entry.n_plans} tried)"
    return None


def _configs(p: GemmProblem) -> list[dict]:
    if _unavailable() is not None or p.capability is None:
        return []
    entry = _probe(p, torch.cuda.current_device())
    return [{"plan": i} for i in entry.buildable(MAX_PLANS)]  # module value at call time


def _default_config(p: GemmProblem) -> dict:
    """The heuristics' first plan that builds (plan 0 where nothing can be asked)."""
    configs = _configs(p)
    return configs[0] if configs else {"plan": 0}


def _prepare(weight: Fp8Weight) -> dict:
    if weight.scheme is Scheme.CHANNEL_TOKEN or weight.scale.numel() > 1:
        scale_b = weight.channel_scale()  # (N,) fp32, read as (1, 1, N)
    else:
        scale_b = weight.scale.float().reshape(1).contiguous()
    # The graph describes W with row-major (N, K) strides (_build_graph) and reads the bytes
    # at its pointer as such: a strided Fp8Weight.data (a transposed view) would be misread.
    # A contiguous copy where it is not (the same tensor where it is: no memory).
    return {"scale_b": scale_b, "w": weight.data.contiguous()}


def _run(
    x, weight, packed, *, act_scale=None, bias=None, out_dtype=torch.bfloat16, config=None, out=None
):
    scheme = weight.scheme
    xq, sa = act_quant.for_gemm(x, weight, act_scale)
    m = xq.shape[0]
    problem = GemmProblem(
        m=m, n=weight.n, k=weight.k, scheme=scheme, act_dtype=x.dtype, out_dtype=out_dtype,
        capability=torch.cuda.get_device_capability(x.device),
        channel_weight_scale=scheme is Scheme.PER_TENSOR and weight.scale.numel() > 1,
    )
    dev = x.device.index if x.device.index is not None else torch.cuda.current_device()
    entry = _graph(problem, dev)
    if entry.declined is not None:
        raise BackendError(entry.declined)
    want = 0 if config is None else int(config["plan"])
    index = _first_built_from(entry, want, dev, problem)  # plan_run: the same walk
    sa = sa.float().reshape(m if sa.numel() > 1 else 1).contiguous()
    y = out if _writable(out, m, weight.n, out_dtype) and bias is None else \
        torch.empty(m, weight.n, dtype=out_dtype, device=x.device)
    cudnn = _cudnn()
    handle = _handle(dev)
    cudnn.set_stream(handle, torch.cuda.current_stream(x.device).cuda_stream)
    pack = {_X: xq.contiguous(), _W: packed["w"], _SA: sa, _SB: packed["scale_b"], _Y: y}
    entry.graph.execute_plan_at_index(pack, entry.workspaces[index], index, handle)
    if bias is not None:
        y = y + bias.to(out_dtype)
    if out is None:
        return y
    return out if y is out else out.copy_(y)


def plan_run(problem: GemmProblem, config) -> int:
    """The plan a call of ``problem`` (its exact M, the current device) with ``config`` runs,
    as _run walks: ``config["plan"]`` where it builds at that M, else the next one that does
    (tuned at the bucket's M, an index may not build at another M of the bucket). A result
    labelled with the config alone may have timed another plan (2026-12-06 audit):
    benchmarks record this beside it. GPU only."""
    dev = torch.cuda.current_device()
    entry = _graph(problem, dev)
    if entry.declined is not None:
        raise BackendError(entry.declined)
    want = 0 if config is None else int(config["plan"])
    return _first_built_from(entry, want, dev, problem)


def _first_built_from(entry: GraphEntry, want: int, dev: int, problem: GemmProblem) -> int:
    """``want`` if that plan builds for this graph, else the next one that does (wrapping)."""
    errors = []
    n = entry.n_plans
    for i in [*range(want, n), *range(min(want, n))]:
        err = _build_plan(entry, i, dev)
        if err is None:
            return i
        errors.append(f"plan {i}: {err}")
    raise BackendError(f"no cuDNN plan from index {want} builds for {problem.key()} "
                       f"({entry.n_plans} plans): " + "; ".join(errors[:3]))


def _writable(out, m: int, n: int, dtype: torch.dtype) -> bool:
    return out is not None and out.shape == (m, n) and out.dtype == dtype and out.is_contiguous()


BACKEND = Backend(
    name="cudnn",
    # Seen on the H200 (2026-11-30, cuDNN 9.19, frontend 1.32, torch.profiler, 5120x6144 M=8):
    # per_tensor plan 0 (eng0) is cuBLASLt's nvjet_sm90_qqtst_*; channel_token plans (eng7)
    # are cudnn_generated_fort_native_sm80_matMul_pointwise_pointwise_* plus a device
    # Memset; before them our _fp8_act_quant_kernel (aten's ops where Triton is absent).
    kernel_family=r"cudnn_generated|nvjet|xmma|cutlass|gemm|Memset|_fp8_act_quant"
                  r"|elementwise|reduce_kernel",
    description="cuDNN frontend FP8 matmul graph, scales as pointwise ops; plan = heuristics index",
    unavailable_reason=_unavailable,
    check=_check,
    prepare=_prepare,
    run=_run,
    configs=_configs,
    default_config=_default_config,
)
