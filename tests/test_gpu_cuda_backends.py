"""The nvcc-built CUDA backends (cutlass, stream) on the GPU (marker: gpu).

Every config the tuner may pick (``be.configs(problem)``: CUTLASS's split-K 2/3/4, stream-K,
ping-pong and prefetch+PDL builds; the stream kernel's stages, work splits, clusters and xq)
against the float64 reference on the same quantized operands, with a bias, into an output
poisoned with NaN, on fresh random inputs (DESIGN.md "Numerics contract"); the stream
kernel's static shared memory as the loaded module reports it; FP8 x given with
column-major or misaligned operands; a CUTLASS workspace that grows after a CUDA graph was
captured with it, and two streams at once; CUTLASS's PDL chain in a graph against plain
launches; a second GPU (where there is one)."""

from __future__ import annotations

import functools

import pytest
import torch

from fp8tower import backends
from fp8tower.backends import act_quant, cutlass, stream
from fp8tower.backends.reference import fp8_linear_ref
from fp8tower.formats import FP8_DTYPE, Scheme, quantize_weight, sqnr_db
from fp8tower.problem import GemmProblem

pytestmark = pytest.mark.gpu

SCHEMES = [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128]
# 1024x5120: 8 tiles of 128 rows (CUTLASS split-K 2-4, stream clusters of 4 and 8);
# 4096x4352: 17 K steps of 256, a partial one (audit: its 6-stage xq cluster of 2 did not fit)
SHAPES = [(1024, 5120), (4096, 4352)]
MS = [1, 16, 33]
ACT_SCALE = 0.02  # per_tensor's static activation scale (x ~ N(0, 1), outliers to 40)


def _problem(scheme: Scheme, n: int, k: int, m: int) -> GemmProblem:
    return GemmProblem(m, n, k, scheme, capability=(9, 0),
                       static_act_scale=scheme is Scheme.PER_TENSOR)


def _cases(name: str) -> list:
    be = backends.get(name)
    out = []
    for scheme in SCHEMES:
        for n, k in SHAPES:
            for m in MS:
                p = _problem(scheme, n, k, m)
                if be.check(p) is not None:  # stream: M <= 16
                    continue
                for i, cfg in enumerate(be.configs(p)):
                    ident = f"{scheme.value}-{n}x{k}-M{m}-{i}-" + "-".join(
                        f"{key}={val}" for key, val in sorted(cfg.items()))
                    out.append(pytest.param(scheme, n, k, m, cfg, id=ident))
    return out


CUTLASS_CASES, STREAM_CASES = _cases("cutlass"), _cases("stream")


def _skip_unless_available(be) -> None:
    why = be.unavailable_reason()
    if why is not None:
        pytest.skip(why)


@functools.cache
def _operands(scheme: Scheme, n: int, k: int, m: int):
    """(weight, bf16 x, bf16 bias, float64 reference with the bias), seeded, never zeros."""
    g = torch.Generator(device="cuda").manual_seed(1000 * m + n + k + len(scheme.value))
    w = torch.randn(n, k, device="cuda", generator=g) * 0.02
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    x[0, :: max(1, k // 7)] *= 40  # outliers: saturation at +-448 is exercised
    bias = (torch.randn(n, device="cuda", generator=g) * 0.5).bfloat16()
    wq = quantize_weight(w, scheme, act_scale=ACT_SCALE if scheme is Scheme.PER_TENSOR else None)
    ref = fp8_linear_ref(x, wq, bias=bias, out_dtype=torch.float64, compute_dtype=torch.float64)
    assert ref.abs().max() > 0
    return wq, x, bias, ref


def _run(be, wq, x, cfg, *, bias=None, act_scale=None, out=None):
    m = x.shape[0]
    if out is None:
        out = torch.full((m, wq.n), float("nan"), dtype=torch.bfloat16, device="cuda")
    y = be.run(x, wq, be.packed_for(wq), act_scale=act_scale, bias=bias,
               out_dtype=torch.bfloat16, config=cfg, out=out)
    assert y is out
    return y


def _check_vs_reference(be, scheme, n, k, m, cfg):
    wq, x, bias, ref = _operands(scheme, n, k, m)
    p = GemmProblem.for_call(x, wq, torch.bfloat16)
    assert be.check(p) is None and cfg in be.configs(p)
    y = _run(be, wq, x, cfg, bias=bias)
    torch.cuda.synchronize()
    assert not y.isnan().any(), f"{cfg}: NaN left in the output (not every element written)"
    db = sqnr_db(ref, y)
    assert db >= 40, f"{be.name} {cfg} {scheme.value} {n}x{k} M={m}: {db:.1f} dB"


@pytest.fixture(scope="module")
def cutlass_built():
    """Every CUTLASS build the cases use, compiled in parallel up front (one build is ~60 s)."""
    _skip_unless_available(cutlass.BACKEND)
    jobs = [(_problem(*c.values[:4]), c.values[4]) for c in CUTLASS_CASES]
    report = cutlass.BACKEND.precompile(jobs)
    assert not report.failures, report.summary()


@pytest.mark.parametrize(("scheme", "n", "k", "m", "cfg"), CUTLASS_CASES)
def test_cutlass_every_config_vs_reference(cutlass_built, scheme, n, k, m, cfg):
    _check_vs_reference(cutlass.BACKEND, scheme, n, k, m, cfg)


@pytest.mark.parametrize(("scheme", "n", "k", "m", "cfg"), STREAM_CASES)
def test_stream_every_config_vs_reference(scheme, n, k, m, cfg):
    """Every config stream.configs offers launches (the audit's 6-stage xq clusters of
    exactly 232448 dynamic bytes did not) and is right."""
    _skip_unless_available(stream.BACKEND)
    _check_vs_reference(stream.BACKEND, scheme, n, k, m, cfg)


@pytest.mark.parametrize("name", ["cutlass", "stream"])
@pytest.mark.parametrize("m", [1, 16])
def test_dynamic_per_tensor_scale_vs_reference(name, m):
    """per_tensor without a static activation scale: torch's amax math, then the GEMM."""
    be = backends.get(name)
    _skip_unless_available(be)
    n, k = 1024, 5120
    g = torch.Generator(device="cuda").manual_seed(m)
    wq = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, "per_tensor")
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    ref = fp8_linear_ref(x, wq, out_dtype=torch.float64, compute_dtype=torch.float64)
    p = GemmProblem.for_call(x, wq, torch.bfloat16)
    y = _run(be, wq, x, be.default_config(p))
    torch.cuda.synchronize()
    assert sqnr_db(ref, y) >= 40


# ============================================================================ stream: smem


def test_stream_static_shared_memory_is_the_recorded_one():
    """stream.STATIC_SMEM (the configs' budget: dynamic + static <= 232448) against the
    loaded module's own figure for every variant."""
    _skip_unless_available(stream.BACKEND)
    lib = stream.library()
    for (nt, stages, xk), want in stream.STATIC_SMEM.items():
        got = lib.fp8t_stream_static_smem(8 * nt, xk, stages)
        assert got == want, (nt, stages, xk, got, lib.fp8t_stream_last_error())
    limit = torch.cuda.get_device_properties(0).shared_memory_per_block_optin
    assert limit == stream.SMEM_OPTIN


def test_stream_refuses_a_cta_over_the_limit_by_its_sizes():
    """A config past the budget (forced: 6 stages, cluster 4, xq over 5 K steps = 232448
    dynamic bytes) fails with the sizes named, not cudaFuncSetAttribute's bare error."""
    _skip_unless_available(stream.BACKEND)
    wq, x, _, _ = _operands(Scheme.PER_TENSOR, 1024, 5120, 1)
    cfg = {"stages": 6, "pdl": True, "cluster": 4, "xq": True}
    assert not stream.fits(1, stream.XK_FP8_TENSOR, 6, 4, stream.xq_steps(5120, 4))
    with pytest.raises(stream.StreamError, match=r"232448 dynamic \+ 112 static bytes > the "
                                                 r"232448-byte per-block limit"):
        _run(stream.BACKEND, wq, x, cfg)


# ============================================================================ operand layouts


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """A contiguous copy of ``t`` one element past a 16-byte boundary."""
    item = t.element_size()
    buf = torch.empty(t.numel() + 64 // item, dtype=t.dtype, device=t.device)
    off = ((16 - buf.data_ptr() % 16) % 16) // item + 1
    v = buf[off:off + t.numel()].view(t.shape)
    v.copy_(t)
    assert v.is_contiguous() and v.data_ptr() % 16
    return v


@pytest.mark.parametrize("name", ["cutlass", "stream"])
@pytest.mark.parametrize("scheme", SCHEMES, ids=str)
@pytest.mark.parametrize("m", [1, 9])
def test_fp8_x_given_in_any_layout_gives_the_same_bits(name, scheme, m):
    """FP8 x with its scales (a launch plan's hand-over) equals the backend's own pre-pass,
    bit for bit: with block128 scales column-major (stride (1, M)), channel_token's as
    (M, 1), x and out misaligned (copied to / from aligned buffers)."""
    be = backends.get(name)
    _skip_unless_available(be)
    n, k = 1024, 5120
    wq, x, bias, _ = _operands(scheme, n, k, 16 if m > 1 else 1)
    x = x[:m].contiguous()
    p = GemmProblem.for_call(x, wq, torch.bfloat16)
    cfg = be.default_config(p)
    base = _run(be, wq, x, cfg, bias=bias)
    # the backends' own pre-pass (backends/act_quant.py): the same FP8 x and scales
    q, s = act_quant.quantize(x, scheme, wq.act_scale if scheme is Scheme.PER_TENSOR else None)
    if scheme is Scheme.BLOCK128:
        s = s.t().contiguous().t()
        assert s.stride() == (1, m) or m == 1
    elif scheme is Scheme.CHANNEL_TOKEN:
        s = s.reshape(m, 1)
    assert q.dtype == FP8_DTYPE
    out = _misaligned(torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda"))
    y = _run(be, wq, _misaligned(q), cfg, bias=bias, act_scale=s, out=out)
    torch.cuda.synchronize()
    torch.testing.assert_close(y, base, rtol=0, atol=0)


# ============================================================================ CUTLASS workspaces


SPLITK = {"sched": "sk", "tile": "128x16x128", "mode": "splitk", "splits": 4, "pdl": False}


def test_cutlass_graph_replay_after_its_workspace_grew(monkeypatch):
    """A graph captured on stream s with s's split-K workspace; then a larger problem on s
    grows that workspace (the old buffer used to be dropped, its memory reused by the next
    allocations while the graph still wrote it): replays still give the eager bits."""
    _skip_unless_available(cutlass.BACKEND)
    monkeypatch.setattr(cutlass, "_WORKSPACES", {})
    be = cutlass.BACKEND
    small, _, _, _ = _operands(Scheme.PER_TENSOR, 1024, 5120, 1)
    x = torch.randn(1, 5120, device="cuda").bfloat16()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # warm-up on the capture stream: its workspace exists
        eager = _run(be, small, x, SPLITK).clone()
    torch.cuda.current_stream().wait_stream(s)
    key = ("cuda", torch.cuda.current_device(), s.cuda_stream)
    old = cutlass._WORKSPACES[key]
    ptr, size = old.data_ptr(), old.numel()
    del old
    graph = torch.cuda.CUDAGraph()
    out = torch.empty_like(eager)
    with torch.cuda.graph(graph, stream=s):
        _run(be, small, x, SPLITK, out=out)
    big = quantize_weight(torch.randn(4096, 16384, device="cuda") * 0.02, "per_tensor",
                          act_scale=ACT_SCALE)
    with torch.cuda.stream(s):
        _run(be, big, torch.randn(1, 16384, device="cuda").bfloat16(), SPLITK)
    torch.cuda.synchronize()
    assert cutlass._WORKSPACES[key].numel() > size  # it grew
    assert any(w.data_ptr() == ptr for w in cutlass._RETIRED)  # the captured one kept alive
    junk = [torch.full((1 << 20,), float("nan"), device="cuda") for _ in range(64)]
    for _ in range(3):
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out, eager, rtol=0, atol=0)
    del junk


def test_cutlass_two_streams_at_once():
    """Split-K GEMMs on two streams at once each use their own workspace."""
    _skip_unless_available(cutlass.BACKEND)
    be = cutlass.BACKEND
    wq, _, _, _ = _operands(Scheme.PER_TENSOR, 1024, 5120, 1)
    xs = [torch.randn(1, 5120, device="cuda").bfloat16() for _ in range(2)]
    want = [_run(be, wq, x, SPLITK).clone() for x in xs]
    streams = [torch.cuda.Stream() for _ in range(2)]
    outs = [torch.full_like(want[0], float("nan")) for _ in range(2)]
    for s in streams:
        s.wait_stream(torch.cuda.current_stream())
    for _ in range(50):
        for s, x, o in zip(streams, xs, outs):
            with torch.cuda.stream(s):
                _run(be, wq, x, SPLITK, out=o)
    torch.cuda.synchronize()
    for o, w in zip(outs, want):
        torch.testing.assert_close(o, w, rtol=0, atol=0)


# ============================================================================ CUTLASS PDL chain


@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN], ids=str)
@pytest.mark.parametrize("between", [False, True], ids=["gemm_to_gemm", "elementwise_between"])
def test_cutlass_pdl_chain_in_graph_equals_plain(scheme, between):
    """Ten pf GEMMs (example 63: weights before griddepcontrol.wait), each reading the
    previous output (directly or through a torch kernel), with a bias, launched with PDL in
    one CUDA graph with early-launch edges (graph_edges): the plain launches' bits."""
    from fp8tower import graph_edges

    be = cutlass.BACKEND
    _skip_unless_available(be)
    n = k = 2048
    g = torch.Generator(device="cuda").manual_seed(5)
    layers = [quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, scheme,
                              act_scale=ACT_SCALE if scheme is Scheme.PER_TENSOR else None)
              for _ in range(10)]
    bias = (torch.randn(n, device="cuda", generator=g) * 0.1).bfloat16()
    x0 = torch.randn(1, k, device="cuda", generator=g).bfloat16()
    pf = next(c for c in be.configs(GemmProblem.for_call(x0, layers[0], torch.bfloat16))
              if c["sched"] == "pf")

    def chain(x, pdl):
        for wq in layers:
            x = be.run(x, wq, be.packed_for(wq), bias=bias, out_dtype=torch.bfloat16,
                       config={**pf, "pdl": pdl})
            if between:
                x = x * 0.5
        return x

    plain = chain(x0, False)
    chain(x0, True)  # warm-up before capture
    graph = graph_edges.new_graph()
    with graph_edges.capture(graph):
        out = chain(x0, True)
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert not out.isnan().any()
        torch.testing.assert_close(out, plain, rtol=0, atol=0)


# ============================================================================ a second GPU


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
@pytest.mark.parametrize("name", ["cutlass", "stream"])
def test_second_gpu_while_the_first_is_current(name):
    """Both backends' launches (and cudaFuncSetAttribute, which the stream kernel used to set
    once per process) act on the current device: x on cuda:1 while cuda:0 is current runs
    on cuda:1, after a run on cuda:0, and gives cuda:0's bits."""
    be = backends.get(name)
    _skip_unless_available(be)
    n, k, m = 1024, 5120, 3
    wq0, x0, bias0, ref = _operands(Scheme.PER_TENSOR, n, k, m)
    cfg = be.default_config(GemmProblem.for_call(x0, wq0, torch.bfloat16))
    y0 = _run(be, wq0, x0, cfg, bias=bias0)
    dev1 = torch.device("cuda", 1)
    wq1, x1, bias1 = wq0.to(dev1), x0.to(dev1), bias0.to(dev1)
    with torch.cuda.device(0):
        out1 = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device=dev1)
        y1 = be.run(x1, wq1, be.packed_for(wq1), bias=bias1, out_dtype=torch.bfloat16,
                    config=cfg, out=out1)
        assert torch.cuda.current_device() == 0
    torch.cuda.synchronize(dev1)
    torch.testing.assert_close(y1.cpu(), y0.cpu(), rtol=0, atol=0)
    assert sqnr_db(ref.cpu(), y1.cpu()) >= 40


# ============================================================================ kernel family


@pytest.mark.parametrize("name", ["cutlass", "stream"])
@pytest.mark.parametrize("case", ["dynamic_bias_odd_out", "fp8_x_misaligned"])
def test_kernel_family_matches_the_profiled_kernels(name, case):
    """Every kernel the profiler records for one call matches the backend's kernel_family
    (trace/attribute.py reports any other as a mismatch): a dynamic per-tensor scale's torch
    math, the bias add, copies into a misaligned out or from a misaligned FP8 x, CUTLASS's
    split-K workspace memset; and the GEMM itself is among them."""
    from torch.profiler import ProfilerActivity, profile

    be = backends.get(name)
    _skip_unless_available(be)
    n, k, m = 1024, 5120, 3
    g = torch.Generator(device="cuda").manual_seed(11)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    out = None
    if case == "dynamic_bias_odd_out":
        wq = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, "per_tensor")
        bias = torch.randn(n, device="cuda", generator=g)  # float32: a cast to bfloat16 too
        act = None
        out = _misaligned(torch.zeros(m, n, dtype=torch.bfloat16, device="cuda"))
    else:
        wq, _, _, _ = _operands(Scheme.CHANNEL_TOKEN, n, k, 16)
        bias = None
        x, act = act_quant.quantize(x, Scheme.CHANNEL_TOKEN)
        x = _misaligned(x)
    cfg = SPLITK if name == "cutlass" else be.default_config(
        GemmProblem.for_call(x, wq, torch.bfloat16))

    def call():
        return be.run(x, wq, be.packed_for(wq), act_scale=act, bias=bias,
                      out_dtype=torch.bfloat16, config=cfg, out=out)

    call()  # builds, workspaces, counters
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        call()
        torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events()
                    if e.device_type == torch.autograd.DeviceType.CUDA})
    print(f"\n{name} {case}:", *names, sep="\n  ")
    regex = be.kernel_regex()
    assert any(("fp8t_stream_gemm" if name == "stream" else "fp8tower_cutlass::") in s
               for s in names), names
    assert all(regex.search(s) for s in names), [s for s in names if not regex.search(s)]
