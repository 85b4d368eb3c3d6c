"""Cached launch plans: the eager hot path of :class:`~fp8tower.nn.linear.Fp8Linear`.

An unplanned call validates x, builds a GemmProblem (asking CUDA for the capability),
looks up the dispatch memo, re-derives the kernel config, grid and buffers and launches
through Triton's generic launcher (which re-binds and re-specializes every argument).
None of that changes between decode steps. A plan does it once per module and input
(shape, dtype, device) and keeps: the backend and config, the grid, the buffers (split-K
partials and counters, the activation-quant outputs), the scales, and for Triton the
compiled kernels of its first launch, which later calls launch directly
(``CompiledKernel.run``) with only x and y changed.

What invalidates a plan (checked per call, a few attribute reads in
``Fp8Linear.forward``): the module's buffers replaced (``.to()``, ``load_state_dict``,
assignment) or edited in place (their ``_version`` counters), a dispatch change
(:func:`fp8tower.dispatch.generation`), a new ``backend`` or ``out_dtype``. Plans are not
built under CUDA graph capture (a capture-time dispatch miss is not final, and buffers
must not come from the graph's pool) but are used there, so warm up eagerly first.

Eager and captured calls may differ, and then the plan is ``eager_only``: a captured call
of its module runs ``Plan.graph``, the plan of the graph's dispatch choice, which the eager
plan's first call has run once (``Plan.warm``: a kernel cannot be loaded during a capture).
A graph then runs the kernels a plan of that choice runs where eager and graph agree: before
session 66 it ran the choice unplanned, whose CUTLASS path quantizes x without PDL, unlike
the plan's pre-pass (``_quant_first_plan``): the 27B per_tensor step at M = 32 whose
out_proj / o_proj were such a tie ran 3.152 ms so on an H100, 3.090 planned (64 PDL edges a
step fewer; results/session66_2026-12-07/tie/, and session65_2026-12-07/c8/ on an H200:
2.385 ms, its trace of the same cache, planned, 2.301). Two ways:
- ``eager_one_launch``: where the dispatch choice takes two launches (channel_token /
  block128: pre-pass + GEMM; per_tensor's and weight_only's Triton pre-pass pairs), an
  eager plan runs one Triton launch that quantizes x itself, the same bits;
- dispatch's two choices per key: a tie taken on the cheapest eager host path, where a
  CUDA graph takes the fastest GPU time (fp8tower.dispatch's module doc).
Inside :func:`same_kernels_as_graphs` plans run the graph's choice.

Buffers are reused across calls: calls of one module must be ordered on one stream (the
split-K counters already required that). The direct launch is taken only where it is
known to be equivalent (same device, 16-byte aligned contiguous x); anything else takes
Triton's generic launch with the plan's arguments.
"""

from __future__ import annotations

import contextlib
import functools

import torch

from .. import env
from ..backends import current_device
from ..formats import ACT_DTYPES, FP8_DTYPE, Scheme

# Plans are for decode-sized inputs, where the host sets the pace; larger M (prefill) is
# GPU-bound and would only grow the cache with per-shape buffers.
MAX_PLANNED_M = 64
MAX_PLANS_PER_MODULE = 16


def plannable(x: torch.Tensor, m: int, k: int, device: torch.device) -> bool:
    """Whether a call with x (M = ``m`` rows of ``k``) gets a plan: a contiguous bf16 / fp16
    / fp32 x of decode size on the weight's device, outside a CUDA graph capture (a graph
    keeps the dispatch choice). Fp8Linear's eager path and the compiled op both ask this."""
    return (x.dim() >= 1 and x.shape[-1] == k and x.is_contiguous() and x.dtype in ACT_DTYPES
            and 1 <= m <= MAX_PLANNED_M and x.device == device
            and not (x.is_cuda and torch.cuda.is_current_stream_capturing()))


def plans_enabled_default() -> bool:
    """``FP8TOWER_PLAN=0`` turns plans off for modules created afterwards (for A/B runs)."""
    return env.flag("FP8TOWER_PLAN", True)


# ---------------------------------------------------------------------- direct Triton launch


def _raw_stream_fn():
    get = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if get is not None:
        return get
    return lambda index: torch.cuda.current_stream(index).cuda_stream


class DirectLaunch:
    """``jitfn[grid](*args, **kwargs)`` through Triton's generic launcher once; afterwards the
    compiled kernel's own launcher (``CompiledKernel.run``) with the same arguments, where
    only the tensors at ``dynamic`` positions change.

    Pointers go to the direct launcher as integers (``data_ptr()``): for a tensor, Triton's
    launcher calls its ``data_ptr`` and asks the driver whether the pointer is a device one
    (``cuPointerGetAttribute``), on every launch and for every pointer; an integer is taken
    as it is. The plan's own tensors (W, scales, buffers) are kept alive by ``args``; the
    dynamic ones are on the plan's device (its key). Equivalent to the generic path because
    the specialization cannot change: every other argument is the same object, and the
    dynamic tensors are checked to be 16-byte aligned when the first launch's were (Triton
    specializes pointers on 16-byte alignment). Falls back to the generic launch when the
    direct one is unavailable (the CPU interpreter, a Triton whose ``CompiledKernel`` lacks
    ``run``/``function``/``packed_metadata``), on another device, or for unaligned tensors.
    ``direct_launches`` counts the direct ones.
    """

    def __init__(self, jitfn, grid, args, kwargs, dynamic: tuple[int, ...], device: torch.device):
        self.jitfn, self.grid, self.kwargs = jitfn, tuple(grid) + (1,) * (3 - len(grid)), kwargs
        self.dynamic = dynamic
        self.aligned = all(_aligned(args[i]) for i in dynamic)
        # not the first call's x and y: every launch passes its own, and a plan that held
        # them kept an activation alive (under torch.compile(mode="reduce-overhead"), one in
        # the graph's pool, which the warm-up refuses; a review, 2026-12-06)
        self.args = [None if i in dynamic else a for i, a in enumerate(args)]
        self.device_index = device.index if device.type == "cuda" else None
        self.compiled = None
        self.full_args: list | None = None
        self.direct_launches = 0
        self.generic_launches = 0

    def __call__(self, *tensors) -> None:
        full = self.full_args
        if full is not None and _CURRENT_DEVICE() == self.device_index:
            full = full.copy()
            for pos, t in zip(self.dynamic, tensors):
                ptr = t.data_ptr()
                if ptr % 16 and self.aligned:
                    break
                full[pos] = ptr
            else:
                c = self.compiled
                stream = _RAW_STREAM(self.device_index)
                g = self.grid
                rt = self.knobs.runtime  # as JITFunction.run does (profiler hooks included)
                enter = rt.launch_enter_hook  # launch_metadata is None without it (triton 3.4+)
                c.run(g[0], g[1], g[2], stream, c.function, c.packed_metadata,
                      None if enter is None else c.launch_metadata(g, stream, *full), enter,
                      rt.launch_exit_hook, *full)
                self.direct_launches += 1
                return
        args = self.args.copy()
        for pos, t in zip(self.dynamic, tensors):
            args[pos] = t
        compiled = self.jitfn[self.grid](*args, **self.kwargs)
        self.generic_launches += 1
        if self.compiled is None and self.device_index is not None and self._direct_ok(tensors):
            self._bind(compiled)

    def _direct_ok(self, tensors) -> bool:
        if _CURRENT_DEVICE() != self.device_index:
            return False
        return not self.aligned or all(t.data_ptr() % 16 == 0 for t in tensors)

    def _bind(self, compiled) -> None:
        """Keep ``compiled`` and the full argument list in the kernel's parameter order, the
        plan's own tensors as their device pointers."""
        self.knobs = _triton_knobs()
        if self.knobs is None or compiled is None:
            return
        if not all(hasattr(compiled, a) for a in ("run", "packed_metadata", "launch_metadata")):
            return
        names = list(getattr(self.jitfn, "arg_names", ()))
        values = dict(zip(names, self.args))
        values.update({k: v for k, v in self.kwargs.items() if k in names})
        if len(values) != len(names) or len(self.args) > len(names):
            return  # a parameter we do not know how to pass (a default we never bound)
        compiled.run  # noqa: B018 (loads the module: compiled.function is set after this)
        if getattr(compiled, "function", None) is None:
            return
        self.full_args = [v.data_ptr() if isinstance(v, torch.Tensor) else v
                          for v in (values[n] for n in names)]
        self.compiled = compiled


def _aligned(t) -> bool:
    return isinstance(t, torch.Tensor) and t.data_ptr() % 16 == 0


@functools.cache
def _triton_knobs():
    """triton.knobs (triton >= 3.4 keeps the launch hooks there), imported on first bind so
    that importing fp8tower imports no triton; None: generic launches only."""
    try:
        from triton import knobs
    except ImportError:
        return None
    return knobs


_RAW_STREAM = _raw_stream_fn()
# torch.cuda.is_current_stream_capturing() without its Python frame (CPU builds: never)
IS_CAPTURING = getattr(torch._C, "_cuda_isCurrentStreamCapturing", lambda: False)
# the current CUDA device, one C call (a plan exists only after a launch on the device)
_CURRENT_DEVICE = current_device


# ---------------------------------------------------------------------- plans


class Plan:
    """One resolved call: ``plan(x) -> y`` for a contiguous x of the planned shape (..., K);
    y is (..., N). The kernels take x's pointer as it is: no 2-D view per call."""

    __slots__ = ("__weakref__", "backend", "config", "eager_only", "graph", "launches", "m",
                 "run", "warm")

    def __init__(self, backend, config, m, run, launches=()):
        self.backend, self.config, self.m, self.run = backend, config, m, run
        self.launches = tuple(launches)
        self.eager_only = False  # True: not the graph's choice; captured calls run ``graph``
        # eager_only on a GPU: the plan of the graph's choice (None: captured calls go
        # unplanned), and warm(x), which runs it once, eagerly, loading its kernels
        self.graph: Plan | None = None
        self.warm = None

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        return self.run(x)

    @property
    def direct_launches(self) -> int:
        return sum(d.direct_launches for d in self.launches)


def build(x: torch.Tensor, weight, *, bias, out_dtype, backend) -> Plan:
    """Resolve (backend, config) for a contiguous x (..., K) and bind everything that does
    not change. On a GPU the graph's choice is resolved too: where the plan runs other
    kernels, it is ``eager_only``, ``graph`` is the plan of that choice and ``warm`` runs
    it (the module doc)."""
    from .. import dispatch
    from ..problem import GemmProblem

    x2 = x.view(-1, weight.k)
    problem = GemmProblem.for_call(x2, weight, out_dtype, None, bias=bias)
    graph = graph_choice(problem, backend, x2)
    be, config = graph if graph is not None and not _eager_twins \
        else dispatch.resolve(problem, backend)
    shape = (*x.shape[:-1], weight.n)
    plan = _build(x2, weight, problem, be, config, bias=bias, out_dtype=out_dtype,
                  backend=backend, out_shape=shape)
    if graph is not None and (plan.eager_only or graph != (be, config)):
        plan.eager_only = True  # a captured call takes the graph's choice, planned
        plan.graph = _build(x2, weight, problem, *graph, bias=bias, out_dtype=out_dtype,
                            backend=backend, out_shape=shape, eager_twin=False)
        plan.warm = plan.graph.run
    return plan


def graph_choice(problem, backend, x2: torch.Tensor):
    """The dispatch choice a CUDA graph's capture of this call runs; None off CUDA (nothing
    is captured there, and the eager choice is all a plan needs)."""
    from .. import dispatch

    return dispatch.resolve(problem, backend, graph=True) if x2.is_cuda else None


def _build(x2, weight, problem, be, config, *, bias, out_dtype, backend, out_shape,
           eager_twin: bool = True) -> Plan:
    """The plan running (``be``, ``config``); ``eager_twin``: its eager one-launch twin where
    one applies (eager_one_launch), else exactly that choice's kernels (a graph's plan)."""
    one_launch_quant = x2.dtype != FP8_DTYPE and not (
        weight.scheme is Scheme.PER_TENSOR and weight.act_scale is None)  # no global amax
    twin = eager_one_launch(problem, be, config, backend) \
        if one_launch_quant and eager_twin else None
    if twin is not None:  # eager only: a captured call takes the dispatch choice
        plan = _triton_plan(x2, weight, twin[0].packed_for(weight), twin[0], twin[1],
                            bias=bias, out_dtype=out_dtype, out_shape=out_shape)
        plan.eager_only = True
        return plan
    packed = be.packed_for(weight)
    if be.name == "triton" and one_launch_quant:
        return _triton_plan(x2, weight, packed, be, config, bias=bias, out_dtype=out_dtype,
                            out_shape=out_shape)
    if be.name in QUANT_FIRST and one_launch_quant and x2.is_cuda:
        return _quant_first_plan(x2, weight, packed, be, config, bias=bias, out_dtype=out_dtype,
                                 out_shape=out_shape)
    shape2 = x2.shape

    def run(x, be=be, weight=weight, packed=packed, bias=bias, out_dtype=out_dtype, config=config):
        y = be.run(x.view(shape2), weight, packed, act_scale=None, bias=bias,
                   out_dtype=out_dtype, config=config)
        # no view where the shape stays (the compiled op copies a view: a review, 2026-12-05)
        return y if y.shape == out_shape else y.view(out_shape)

    return Plan(be, config, x2.shape[0], run)


# Eager decode is host-bound: one Qwen3-8B-shaped step took ~30 ms of host time in eager
# mode against ~8-10 ms of GPU time under a CUDA graph (results/generate_qwen3-8b_*), so an
# eager call's cost is its launches, not its GPU time. Where the dispatch choice needs two
# launches (channel_token / block128: the activation pre-pass + the GEMM), an eager plan runs
# the Triton GEMM that quantizes x itself (one launch; the same quantized x bit for bit,
# kernels/fp8_gemm.py), slower on the GPU (H200 2026-12-01, M = 1 and 8, 27B tower shapes:
# channel_token 0.86-1.35x, block128 1.02-2.07x the time of the pre-pass pair;
# results/variants_q_fused_H200_2026-12-01.json) but one launch instead of two: with the
# integer pointers of DirectLaunch, a planned call at 4096x4096 M=1 took 14.5 us
# (channel_token) and 14.8 us (block128) of host time, 0.85x and 0.87x nn.Linear's, against
# 1.53x and 1.79x before (results/host_one_launch_H200_2026-12-01/call2_triton.json,
# host_per_backend_H200_2026-12-01/before_quant_first_plans_triton.json), and the Qwen3-8B
# eager step went from 1.20-1.25x to 0.97-1.09x bf16 (generate_qwen3-8b_one_launch_*). Captured
# calls (CUDA graphs, where the GPU time is all that counts) keep the dispatch choice:
# Fp8Linear sends them unplanned.
EAGER_ONE_LAUNCH_MAX_M = 16
_eager_twins = True  # off inside same_kernels_as_graphs(): plans run the graph's kernels


def eager_one_launch_enabled() -> bool:
    """``FP8TOWER_EAGER_ONE_LAUNCH=0`` keeps eager calls on the dispatch choice too."""
    return _eager_twins and env.flag("FP8TOWER_EAGER_ONE_LAUNCH", True)


@contextlib.contextmanager
def same_kernels_as_graphs():
    """Plans built inside run the kernels a CUDA graph of the same call runs (no eager
    one-launch variant; the graph's choice of a tie, :func:`build`), and keep doing so: for
    an eager step whose kernels label a graph replay's (hf/capture.py, tower/capture.py)."""
    global _eager_twins
    before = _eager_twins  # nested: the outer block's setting comes back, not True
    _eager_twins = False
    try:
        yield
    finally:
        _eager_twins = before


def eager_one_launch(problem, be, config, backend):
    """(triton backend, its one-launch config) for an eager call of ``problem`` whose
    dispatch choice (``be``, ``config``) takes two launches; None where it takes one, for
    M > EAGER_ONE_LAUNCH_MAX_M, a backend the caller named other than "triton" (an
    explicit choice is kept), or when turned off (``eager_one_launch_enabled``).
    weight_only: only a Triton choice at M = 1 splitting x per token by the pre-pass
    (``wo_mode`` 3), whose split in the GEMM (4) has its bits; the split per 1x128 group has
    no one-launch twin with its bits. Host time of a planned call, two launches / one (H200
    2026-12-04, results/wo_token_H200_2026-12-04/call7/, idle GPU): 16384x5120 39.4-40.8 /
    30.5-31.6 us, 5120x6144 35.2-42.9 / 20.0-21.5.
    per_tensor (a static scale: ``build`` plans no one-launch quant without one): only a
    Triton choice that takes x from the pre-pass (configs.deep_default at M > 1, the H100's
    configs.small_m_deep at M <= 8, tuned pairs), run as the same tile quantizing x with that
    scale (the same bits: the in-GEMM quantization is the pre-pass's, tests/test_gpu_plan.py
    test_in_kernel_quant_is_bit_exact_on_gpu; test_eager_per_tensor_twin_of_the_deep_pair
    there checks the twin itself, passed on an H100 in session 50's call2). Host time of a
    planned call, H100, untuned (small_m_deep's pair), 4096x4096 / 5120x4096 at M = 1 and 8,
    alternated twice (results/session50_2026-12-06/call1/): 23.0-24.3 us two launches,
    16.1-16.6 one (nn.Linear bf16 15.6-18.8). On the GPU that tile quantizing x itself took
    1.03-1.39x the pair's time at M = 1 (call1/m1_own.json), 1.03-2.04x at M = 2-8 on 18
    shapes (results/session52_2026-12-06/call3/rows.json; the shared default's own tile,
    one launch too, was faster in 37 of those 54 cells but sums in another order): an
    eager call, host-bound, gains (the eager Qwen3-8B-shaped step at batch 4, merged,
    H100: 0.969-0.976x bf16's time with the twin, 1.034-1.045x without; session 52's
    call2 / call3 gen4_*.json); graphs keep the pair. Another backend keeps its
    quant-first plan (not timed against a Triton twin for per_tensor)."""
    from ..backends import get
    from ..kernels import configs

    scheme = problem.scheme
    if problem.m > EAGER_ONE_LAUNCH_MAX_M:
        return None
    if not eager_one_launch_enabled():
        return None
    name = backend.name if hasattr(backend, "name") else backend
    if name not in ("auto", "triton"):
        return None
    if scheme is Scheme.PER_TENSOR and (be.name != "triton" or not config
                                        or not configs.x_is_fp8(scheme, False, config)):
        return None
    triton = be if be.name == "triton" else get("triton")
    if triton.unavailable_reason() is not None or triton.check(problem) is not None:
        return None
    if scheme is Scheme.WEIGHT_ONLY:
        if problem.m != 1 or be.name != "triton" or not config or config.get("wo_mode") != 3:
            return None
        cfg = {k: v for k, v in config.items() if k not in ("pdl", "prefetch")}
        return triton, _fit_x(problem, {**cfg, "prequant": False, "wo_mode": 4})
    base = config if be.name == "triton" and config else configs.default_config(problem)
    if not configs.x_is_fp8(scheme, False, base):
        return None if be.name == "triton" else (triton, base)
    # no PDL: that pairs a pre-pass with its GEMM (kernels/configs.PDL_PAIR)
    cfg = {k: v for k, v in base.items() if k not in ("pdl", "prefetch")}
    cfg["prequant"] = False
    if scheme is Scheme.CHANNEL_TOKEN:
        cfg["fused_amax"] = True
    return triton, _fit_x(problem, cfg)


def _fit_x(problem, cfg: dict) -> dict:
    """``cfg`` on fewer stages where x quantized in the GEMM (staged as it comes, where the
    pair staged FP8) would outgrow shared memory: fp32 x on the deep tile (64 x 512, 4
    stages) at M = 2-16 took 238,592 B of the 232,448 a block may have, 3 stages 173,056
    (sm_90 compiled offline, session 50's review). The estimate (configs.smem_bytes against
    SMEM_BUDGET, 16 rows of x at M = 1 too) is conservative: fp32 x at M = 1 would have fit
    on 4 stages (146,432 B) and runs on 3. Stages do not change the bits."""
    from ..kernels import configs

    return configs.fit_stages(cfg, configs.block_m_for(problem.m), problem.act_dtype.itemsize)


# Backends whose GEMM takes FP8 activations from our separate quant launch
# (backends/act_quant.for_gemm). Their plan launches that quant directly into the plan's
# buffers and hands the backend FP8 x with its scales. Host time of a planned call,
# 4096x4096 M=1 on the H200 machine (2026-12-01, results/host_per_backend_H200_2026-12-01/):
# cuBLASLt per_tensor 58.7 -> 32.6 us, channel_token 67.3 -> 33.7; CUTLASS 87.5 -> 36.7
# and 72.1 -> 35.1.
QUANT_FIRST = ("cublaslt", "cutlass")  # cuDNN keys its graphs by the input dtype: not here


def _quant_first_plan(x2, weight, packed, be, config, *, bias, out_dtype, out_shape) -> Plan:
    from ..kernels import act_quant as aq

    scheme, (m, k) = weight.scheme, x2.shape
    static = weight.act_scale.float().reshape(1) if scheme is Scheme.PER_TENSOR else None
    # a GEMM launched with PDL (CUTLASS "pf") overlaps its start with this pre-pass
    pdl = isinstance(config, dict) and bool(config.get("pdl"))
    # cuBLASLt's layouts written by the quant itself: block128's x padded to 16 rows and its
    # scales M-major, per_tensor's static scale once a row where the weight has one a
    # channel. Before, the backend made them from these buffers on every call: 1-5 launches
    # beside the GEMM (the 2026-12-06 benchmark audit; the 27B tower's merged cuBLASLt
    # block128 step, planned, ran 0.64 ms slower at M = 1 than at M = 16 on an H100).
    q_full = s_full = q = s = None
    if be.name == "cublaslt" and scheme is Scheme.BLOCK128:
        from ..backends.cublaslt import blockwise_x_buffers

        q_full, s_full = blockwise_x_buffers(m, k, x2.device)
        q, s = q_full[:m], s_full[:m]
    elif (be.name == "cublaslt" and scheme is Scheme.PER_TENSOR and weight.scale.numel() > 1
          and m > 1):
        s = torch.empty(m, 1, dtype=torch.float32, device=x2.device)
    grid, args, kw, q, s = aq.quantize_args(x2, scheme, static, q=q, s_out=s, pdl=pdl)
    quant = DirectLaunch(aq._fp8_act_quant_kernel, grid, args, kw, (0,), x2.device)
    if q_full is not None:  # the GEMM reads the padded buffers; its rows past M are dropped
        q, s = q_full, s_full

    def run(x, run=be.run, weight=weight, packed=packed, bias=bias, out_dtype=out_dtype,
            config=config):
        quant(x)
        y = run(q, weight, packed, act_scale=s, bias=bias, out_dtype=out_dtype, config=config)
        if y.shape[0] != m:
            y = y[:m]
        return y if y.shape == out_shape else y.view(out_shape)

    return Plan(be, config, x2.shape[0], run, [quant])


def _triton_plan(x2, weight, packed, be, config, *, bias, out_dtype, out_shape) -> Plan:
    from ..backends import triton_gemm as tg
    from ..kernels import configs, fp8_gemm

    scheme = weight.scheme
    m, n, device = x2.shape[0], weight.n, x2.device
    cfg = config or configs.default_config(GemmProblem_for(x2, weight, out_dtype, bias))
    block_n, block_k, split = cfg["block_n"], cfg["block_k"], cfg["split_k"]
    if scheme is Scheme.BLOCK128 and (128 % block_n or block_k % 128):
        raise ValueError(f"block128 needs BLOCK_N dividing 128 and BLOCK_K a multiple of 128: {cfg}")
    x_fp8 = configs.x_is_fp8(scheme, False, cfg)
    per_token = configs.split_per_token(scheme, cfg, m)  # weight_only's: a scale a token
    if scheme is Scheme.WEIGHT_ONLY and x_fp8 and block_k % 128:
        raise ValueError(f"weight_only's split pre-pass needs BLOCK_K a multiple of 128: {cfg}")
    rows = 2 * m if scheme is Scheme.WEIGHT_ONLY and x_fp8 else m  # weight_only's split x
    block_m = configs.block_m_for(rows, split=rows != m)
    grid_m = -(-rows // block_m)
    ws = packed["ws"]
    xs, xs_stride = ws, 0
    if scheme is Scheme.PER_TENSOR:
        xs = weight.act_scale.float().reshape(1)
    quant = None
    on_gpu = x2.is_cuda
    if x_fp8:  # the activation pre-pass: its outputs are the plan's buffers
        static = xs if scheme is Scheme.PER_TENSOR else None
        if on_gpu:
            from ..kernels import act_quant as aq

            grid, args, kw, q, s = aq.quantize_args(x2, scheme, static, pdl=cfg.get("pdl", False),
                                                    per_token=per_token)
            quant = DirectLaunch(aq._fp8_act_quant_kernel, grid, args, kw, (0,), device)
        else:  # the interpreter's Triton backend quantizes with torch (backends/act_quant.py)
            q, s = tg.quantize_act(x2, scheme, static, per_token=per_token)
        gemm_x = q
        if scheme is not Scheme.PER_TENSOR:
            xs = s
            xs_stride = s.stride(0) if s.dim() == 2 else 1
    else:
        gemm_x = x2
    part, counters = tg.split_buffers(packed, cfg, grid_m, block_m, n, device)
    y0 = torch.empty(m, n, dtype=out_dtype, device=device)
    w, n_packed = tg.launch_weight(packed, cfg, n)
    grid, args, kw = fp8_gemm.launch_args(
        w, gemm_x, y0, ws, xs, bias, part, counters,
        scheme_id=configs.SCHEME_ID[scheme], x_fp8=x_fp8, block_n=block_n, block_m=block_m,
        block_k=block_k, split_k=split, num_warps=cfg["num_warps"], num_stages=cfg["num_stages"],
        ws_row_stride=ws.stride(0) if scheme is Scheme.BLOCK128 else 0, xs_row_stride=xs_stride,
        prefetch=cfg.get("prefetch", 0), pdl=cfg.get("pdl", False), dummy=ws,
        wo_mode=cfg.get("wo_mode", 0), n=n_packed,
    )
    dynamic = (2,) if x_fp8 else (1, 2)  # y; and x when the GEMM reads it
    gemm = DirectLaunch(fp8_gemm._fp8_gemm_decode_kernel, grid, args, kw, dynamic, device)
    shape = out_shape  # y is written through its pointer with row stride N: any contiguous
    # tensor of M * N elements will do, so it is allocated in the caller's shape

    if quant is not None:
        def run(x):
            quant(x)
            y = torch.empty(shape, dtype=out_dtype, device=device)
            gemm(y)
            return y
    elif x_fp8:  # CPU interpreter: torch quantization into the plan's buffer
        def run(x):
            q2, _ = tg.quantize_act(x.view(m, -1), scheme,
                                    xs if scheme is Scheme.PER_TENSOR else None,
                                    per_token=per_token)
            gemm_x.copy_(q2)
            if scheme is not Scheme.PER_TENSOR:
                xs.copy_(_)
            y = torch.empty(shape, dtype=out_dtype, device=device)
            gemm(y)
            return y
    else:
        def run(x):
            y = torch.empty(shape, dtype=out_dtype, device=device)
            gemm(x, y)
            return y

    return Plan(be, cfg, m, run, [d for d in (quant, gemm) if d is not None])


def GemmProblem_for(x2, weight, out_dtype, bias=None):
    from ..problem import GemmProblem

    return GemmProblem.for_call(x2, weight, out_dtype, None, bias=bias)
