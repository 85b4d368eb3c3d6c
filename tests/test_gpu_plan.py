"""Cached launch plans on the GPU (marker: gpu): the direct CompiledKernel launch gives the
same bits as the unplanned path (Triton's generic launcher), also under a CUDA graph."""

import pytest
import torch

from fp8tower.formats import Scheme, quantize_weight, sqnr_db
from fp8tower.nn.linear import Fp8Linear

pytestmark = pytest.mark.gpu


def _planned_and_plain(w, bias, backend):
    """The same weights as two layers: one on launch plans, one without (the reference)."""
    planned = Fp8Linear.from_weight(w, bias, backend=backend)
    plain = Fp8Linear.from_weight(w, bias, backend=backend)
    plain.use_plans = False
    return planned, plain


def _graph_replay_matches(planned, plain, m, k, g, **tol):
    """The planned call captured in a CUDA graph, replayed on new x: the unplanned result."""
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = planned(x)
    x.copy_(torch.randn(m, k, device="cuda", generator=g).bfloat16())
    graph.replay()
    torch.testing.assert_close(y, plain(x), **tol)


@pytest.mark.parametrize("scheme", list(Scheme), ids=str)
@pytest.mark.parametrize("m", [1, 8])
@pytest.mark.parametrize("shape", [(4096, 4096), (1000, 1160)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_direct_launch_equals_generic(scheme, m, shape):
    n, k = shape
    g = torch.Generator(device="cuda").manual_seed(0)
    w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, scheme,
                        act_scale=0.02 if scheme is Scheme.PER_TENSOR else None)
    bias = torch.randn(n, device="cuda", generator=g)
    planned, plain = _planned_and_plain(w, bias, "triton")
    for _ in range(3):
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        torch.testing.assert_close(planned(x), plain(x), rtol=0, atol=0)
    (entry,) = planned._plans.values()
    assert entry.plan.direct_launches > 0, "the direct launch never ran"
    _graph_replay_matches(planned, plain, m, k, g, rtol=0, atol=0)


QUANT_FIRST_CASES = [("cublaslt", s) for s in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN,
                                               Scheme.BLOCK128)] + \
                    [("cutlass", s) for s in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN,
                                              Scheme.BLOCK128)]


@pytest.mark.parametrize(("backend", "scheme"), QUANT_FIRST_CASES, ids=str)
@pytest.mark.parametrize("m", [1, 3])
def test_quant_first_plan_equals_unplanned(backend, scheme, m):
    """cuBLASLt's and CUTLASS's plans launch the activation quant directly into their own
    buffers and pass FP8 x on: the same bits as the unplanned call, also in a CUDA graph."""
    from fp8tower import backends

    why = backends.get(backend).unavailable_reason()
    if why is not None:
        pytest.skip(why)
    n, k = 4096, 4096
    g = torch.Generator(device="cuda").manual_seed(0)
    w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, scheme,
                        act_scale=0.02 if scheme is Scheme.PER_TENSOR else None)
    planned, plain = _planned_and_plain(w, None, backend)
    # CUTLASS's stream-K/split-K reductions may add partials in another order call to call
    tol = {"rtol": 0, "atol": 0} if backend == "cublaslt" else {"rtol": 1e-2, "atol": 1e-3}
    for _ in range(3):
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        torch.testing.assert_close(planned(x), plain(x), **tol)
    (entry,) = planned._plans.values()
    assert entry.plan.backend.name == backend and entry.plan.direct_launches > 0
    _graph_replay_matches(planned, plain, m, k, g, **tol)


@pytest.mark.parametrize("m", [1, 3, 16])
@pytest.mark.parametrize("split", [1, 4])
def test_channel_token_fused_amax_is_bit_exact_on_gpu(m, split):
    """The fused per-token amax (one launch) gives the pre-pass's bits (two launches); an
    all-zero token too (its scale floored at MIN_SCALE: without the floor 0 * (1/0) = NaN on a
    GPU, which the CPU interpreter's cast hides)."""
    from fp8tower.backends import triton_gemm

    n, k = 4096, 5120
    g = torch.Generator(device="cuda").manual_seed(m)
    w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02,
                        Scheme.CHANNEL_TOKEN)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    x[0, -7] = 40.0  # one token's amax in the last split's range
    if m > 1:
        x[-1] = 0.0
    packed = triton_gemm.BACKEND.packed_for(w)
    cfg = {"block_n": 64, "block_k": 256, "split_k": split, "num_warps": 4, "num_stages": 4,
           "prequant": False}
    pre = triton_gemm._run(x, w, packed, config=cfg)
    fused = triton_gemm._run(x, w, packed, config={**cfg, "fused_amax": True})
    assert bool(torch.isfinite(fused).all())
    torch.testing.assert_close(fused, pre, rtol=0, atol=0)


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 16, 33])
@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128],
                         ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_in_kernel_quant_is_bit_exact_on_gpu(m, scheme, dtype):
    """x quantized in the GEMM (per_tensor's static scale, channel_token's fused amax,
    block128's per-group scales) divides by one reciprocal per scale plus an FMA correction
    (fp8_gemm._div_by_scale): the pre-pass's exact division, bit for bit, on values spread
    over 12 binades, bf16 and fp32 x (fp32 x has more quotients on an FP8 rounding tie).
    per_tensor's x * (1.0 / s) (div.full.f32, approximate) was not. Paths: M = 1 the one-row
    vector, M = 2 / 3 the rows tiled (fp8_gemm.x_rows), M = 5 / 8 per_tensor's rows tiled
    (channel_token's and block128's whole tile: x_rows stops at 4 rows for them), M = 16 /
    33 the whole tile."""
    from fp8tower.backends import triton_gemm

    n, k = 2048, 4096
    g = torch.Generator(device="cuda").manual_seed(100 + m)
    w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, scheme,
                        act_scale=0.0137 if scheme is Scheme.PER_TENSOR else None)
    x = torch.randn(m, k, device="cuda", generator=g)
    x = (x * torch.exp2(torch.randint(-6, 6, (m, k), device="cuda", generator=g))).to(dtype)
    packed = triton_gemm.BACKEND.packed_for(w)
    cfg = {"block_n": 64, "block_k": 256, "split_k": 2, "num_warps": 4, "num_stages": 3}
    fused_cfg = {**cfg, "prequant": False}
    if scheme is Scheme.CHANNEL_TOKEN:
        fused_cfg["fused_amax"] = True
    pre = triton_gemm._run(x, w, packed, config={**cfg, "prequant": scheme is not
                                                  Scheme.CHANNEL_TOKEN})
    fused = triton_gemm._run(x, w, packed, config=fused_cfg)
    torch.testing.assert_close(fused, pre, rtol=0, atol=0)


@pytest.mark.parametrize("scheme", [Scheme.CHANNEL_TOKEN, Scheme.BLOCK128], ids=str)
def test_eager_plan_is_one_launch_and_graphs_keep_the_dispatch_choice(scheme):
    """With backend auto, an eager channel_token / block128 call runs one Triton launch
    (x quantized in the GEMM, plan.eager_one_launch); a captured call runs the plan of the
    graph's dispatch choice (Plan.graph): the eager plan's launches do not move during the
    capture, the graph plan's do."""
    n, k, m = 4096, 4096, 1
    g = torch.Generator(device="cuda").manual_seed(7)
    w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, scheme)
    planned, plain = _planned_and_plain(w, None, "auto")
    for _ in range(3):  # another tile or backend (CUTLASS: FP8 fast accumulation) may sum
        # in another order: bf16-ulp differences, so the same quantized operands by SQNR
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        assert sqnr_db(plain(x).double(), planned(x)) >= 40
    (entry,) = planned._plans.values()
    # Where the dispatch choice (the tuning cache's) already is one Triton launch (tuned
    # channel_token at M = 1: the fused amax), the plan is that choice, for graphs too.
    from fp8tower import dispatch
    from fp8tower.kernels.configs import x_is_fp8
    from fp8tower.problem import GemmProblem

    p = GemmProblem.for_call(x, w, torch.bfloat16)
    be, cfg = dispatch.resolve(p, "auto")
    two_launches = be.name != "triton" or x_is_fp8(scheme, False, cfg or {})
    # a tie the graph takes otherwise (dispatch's two choices) is eager-only too
    eager_only = two_launches or dispatch.resolve(p, "auto", graph=True) != (be, cfg)
    assert entry.eager_only == eager_only and entry.plan.backend.name == "triton"
    assert len(entry.plan.launches) == 1 and entry.plan.direct_launches > 0
    before = entry.plan.direct_launches
    gp = entry.plan.graph
    assert (gp is not None) == eager_only
    graph_before = gp.direct_launches if gp is not None else 0
    _graph_replay_matches(planned, plain, m, k, g, rtol=1e-2, atol=1e-2)  # the same choice
    if eager_only:  # captured calls ran the plan of the graph's choice
        assert entry.plan.direct_launches == before
        assert (gp.backend, gp.config) == dispatch.resolve(p, "auto", graph=True)
        assert not gp.launches or gp.direct_launches > graph_before


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
@pytest.mark.parametrize("m", [2, 3, 8, 16])
def test_eager_per_tensor_twin_of_the_deep_pair(m, dtype, monkeypatch):
    """An eager per_tensor call whose choice is the deep tile from the pre-pass pair (the
    H100's untuned small_m_deep, deep_default at M > 1) runs that tile quantizing x itself:
    one launch, the pair's bits; fp32 x on fewer stages (4 outgrew shared memory, session
    50's review); a captured call runs the pair's plan (Plan.graph), not the twin's."""
    from fp8tower import backends, dispatch
    from fp8tower.kernels import configs as kc
    from fp8tower.problem import GemmProblem

    n, k = 4096, 4096
    g = torch.Generator(device="cuda").manual_seed(300 + m)
    w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02,
                        Scheme.PER_TENSOR, act_scale=0.0137)
    p = GemmProblem(m, n, k, Scheme.PER_TENSOR, capability=(9, 0), act_dtype=dtype)
    pair = kc.deep_tile(p, {"prequant": True, **kc.PDL_PAIR})
    triton = backends.get("triton")
    monkeypatch.setattr(dispatch, "resolve", lambda problem, backend, graph=False: (triton, pair))
    planned, plain = _planned_and_plain(w, None, "auto")
    for _ in range(2):
        x = torch.randn(m, k, device="cuda", generator=g)
        x = (x * torch.exp2(torch.randint(-6, 6, (m, k), device="cuda", generator=g))).to(dtype)
        torch.testing.assert_close(planned(x), plain(x), rtol=0, atol=0)
    (entry,) = planned._plans.values()
    assert entry.eager_only and len(entry.plan.launches) == 1
    assert not kc.x_is_fp8(Scheme.PER_TENSOR, False, entry.plan.config)
    assert (entry.plan.config["num_stages"] < pair["num_stages"]) == (dtype is torch.float32)
    before = entry.plan.direct_launches
    assert before > 0  # the plan launches directly: a capture that used it would count
    gp = entry.plan.graph
    assert gp.config == pair and len(gp.launches) == 2  # the pair: pre-pass + GEMM
    graph_before = gp.direct_launches
    x = torch.randn(m, k, device="cuda", generator=g).to(dtype)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = planned(x)
    x.copy_(torch.randn(m, k, device="cuda", generator=g).to(dtype))
    graph.replay()
    torch.testing.assert_close(y, plain(x), rtol=0, atol=0)
    assert entry.plan.direct_launches == before  # the capture ran the pair's plan
    assert gp.direct_launches > graph_before


@pytest.mark.parametrize("scheme", [Scheme.CHANNEL_TOKEN, Scheme.BLOCK128], ids=str)
@pytest.mark.parametrize("m", [1, 8])
def test_pdl_pre_pass_pair_is_exact_planned_and_in_a_graph(scheme, m):
    """Pre-pass + GEMM both launched with PDL (the pre-pass triggers at once, the GEMM
    prefetches W and waits): the bits of the plain pair, through a plan's direct launches
    (which carry the PDL launch attribute) and replayed in a CUDA graph, several in a row."""
    from fp8tower.backends import triton_gemm
    from fp8tower.kernels import configs as kc
    from fp8tower.nn import plan as _plan
    from fp8tower.problem import GemmProblem

    n, k = 4096, 5120
    g = torch.Generator(device="cuda").manual_seed(11)
    w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, scheme)
    packed = triton_gemm.BACKEND.packed_for(w)
    base = kc.default_config(GemmProblem(m, n, k, scheme, capability=(9, 0)))
    # the default's tile with the pre-pass (channel_token at M = 1 defaults to one launch)
    base = {key: v for key, v in base.items() if key not in ("fused_amax", "pdl", "prefetch")}
    base["prequant"] = True if scheme is Scheme.BLOCK128 else base["prequant"]
    assert kc.x_is_fp8(scheme, False, base)
    cfg = {**base, "pdl": True, "prefetch": 2}
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    p = _plan._triton_plan(x, w, packed, triton_gemm.BACKEND, cfg, bias=None,
                           out_dtype=torch.bfloat16, out_shape=(m, n))
    for _ in range(3):
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        want = triton_gemm._run(x, w, packed, config=base)
        torch.testing.assert_close(p(x), want, rtol=0, atol=0)
        torch.testing.assert_close(triton_gemm._run(x, w, packed, config=cfg), want, rtol=0, atol=0)
    assert p.direct_launches > 0
    xs = [torch.randn(m, k, device="cuda", generator=g).bfloat16() for _ in range(3)]
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        ys = [p(xi) for xi in xs]  # three pairs back to back: each waits for the one before
    for xi in xs:
        xi.copy_(torch.randn(m, k, device="cuda", generator=g).bfloat16())
    graph.replay()
    for xi, yi in zip(xs, ys):
        torch.testing.assert_close(yi, triton_gemm._run(xi, w, packed, config=base), rtol=0, atol=0)


@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128],
                         ids=str)
# (16, 6000), (32, 5120): per_tensor's wider programs at M >= 16 (act_quant.per_tensor_group)
@pytest.mark.parametrize("m,k", [(1, 5120), (8, 17408), (3, 1000), (16, 6000), (32, 5120)])
def test_pre_pass_gives_the_exact_division_bits_on_gpu(scheme, m, k):
    """The activation pre-pass (kernels/act_quant.py: one reciprocal per scale plus an FMA
    correction per element, 1 to 16 warps) gives formats' exact x / scale, bit for bit, and
    its scales, on values spread over 12 binades. The in-GEMM quantization is checked against
    this kernel elsewhere, so this is the anchor of both to the exact division."""
    from fp8tower.formats import quantize_activation
    from fp8tower.kernels.act_quant import quantize

    g = torch.Generator(device="cuda").manual_seed(200 + m)
    x = torch.randn(m, k, device="cuda", generator=g)
    x = (x * torch.exp2(torch.randint(-6, 6, (m, k), device="cuda", generator=g))).bfloat16()
    static = torch.tensor(0.0137, device="cuda") if scheme is Scheme.PER_TENSOR else None
    q, s = quantize(x, scheme, static)
    # formats on the GPU and on the CPU (where torch's float32 division is IEEE throughout)
    for dev in ("cuda", "cpu"):
        q_ref, s_ref = quantize_activation(x.to(dev), scheme,
                                           None if static is None else static.to(dev))
        torch.testing.assert_close(s.reshape(s_ref.shape).to(dev), s_ref, rtol=0, atol=0)
        assert torch.equal(q.view(torch.uint8).to(dev), q_ref.view(torch.uint8)), dev


def test_amax_scale_under_capture_first():
    """formats.amax_scale called first inside a CUDA graph capture does not cache a divisor
    that only the graph fills: eager calls after the capture still divide by 448."""
    from fp8tower import formats

    formats._fp8_max_on.cache_clear()
    amax = torch.tensor([448.0, 3.5], device="cuda")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        s = formats.amax_scale(amax)
    graph.replay()
    want = torch.tensor([1.0, 3.5 / 448.0], device="cuda")
    torch.testing.assert_close(s, want, rtol=0, atol=0)
    torch.testing.assert_close(formats.amax_scale(amax), want, rtol=0, atol=0)


@pytest.mark.parametrize("backend", ["triton", "auto"])
@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128],
                         ids=str)
def test_captured_buffers_survive_the_plan_cache(backend, scheme):
    """A captured graph keeps the addresses of what its kernels read: a plan's buffers (x's
    FP8 copy and scale) or, unplanned (eager-only plans: a pre-pass pair's under auto),
    the prepared weight's (kernel scales, split-K counters). Clearing the plans (17
    shapes, refresh, backend) must not free them: replays after other allocations still give
    the unplanned result (nn/linear.py Fp8Linear._pinned)."""
    n, k, m = 1024, 1280, 1
    g = torch.Generator(device="cuda").manual_seed(11)
    w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, scheme,
                        act_scale=0.05 if scheme is Scheme.PER_TENSOR else None)
    planned, plain = _planned_and_plain(w, None, backend)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    planned(x)  # the plan, eagerly
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        planned(x)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = planned(x)
    assert planned._pinned
    for mm in range(2, 19):
        planned(torch.randn(mm, k, device="cuda").bfloat16())
    planned.refresh()
    planned.backend = backend
    torch.cuda.empty_cache()
    junk = [torch.full((mm, k), float("nan"), device="cuda", dtype=torch.bfloat16)
            for mm in range(1, 64)]  # would take the freed addresses
    for _ in range(3):
        x.copy_(torch.randn(m, k, device="cuda", generator=g).bfloat16())
        graph.replay()
        torch.cuda.synchronize()
        assert sqnr_db(plain(x).double(), y) >= 40
    assert all(bool(t.isnan().all()) for t in junk)  # the replays wrote nothing there


def test_act_scale_number_under_capture():
    """A number act_scale used eagerly first is one cached device tensor: the captured call
    needs no host-to-device copy; a new number under capture is a clear error."""
    from fp8tower.nn.linear import fp8_linear

    w = quantize_weight(torch.randn(256, 384, device="cuda") * 0.02, Scheme.PER_TENSOR)
    x = torch.randn(2, 384, device="cuda").bfloat16()
    want = fp8_linear(x, w, act_scale=0.0625)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fp8_linear(x, w, act_scale=0.0625)
    torch.cuda.current_stream().wait_stream(s)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = fp8_linear(x, w, act_scale=0.0625)
    graph.replay()
    torch.testing.assert_close(y, want, rtol=0, atol=0)
    graph2 = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="under CUDA graph capture"), torch.cuda.graph(graph2):
        fp8_linear(x, w, act_scale=0.015625)


def test_grad_on_gpu_matches_the_reference_formula():
    w = quantize_weight(torch.randn(512, 640, device="cuda") * 0.02, Scheme.CHANNEL_TOKEN)
    mod = Fp8Linear.from_weight(w, None)
    x = torch.randn(3, 640, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    gy = torch.randn(3, 512, device="cuda", dtype=torch.bfloat16)
    mod(x).backward(gy)
    torch.testing.assert_close(x.grad, gy @ w.dequantize(torch.bfloat16), rtol=0, atol=0)


@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN], ids=str)
def test_a_cuda_graph_runs_its_own_choice_of_a_cached_tie(scheme, monkeypatch, tmp_path):
    """A cached tie (cuBLASLt 1% faster than Triton, whose eager host path is cheaper), served
    by the process's dispatcher from the file: eager calls run Triton's plan; its first call
    runs cuBLASLt's plan once (Plan.warm, loading its kernels), which a captured call then
    runs (the spy counts each call), and the replay matches the eager result. The compiled
    op's path (fp8_linear under capture) takes the graph's choice too."""
    import dataclasses

    from fp8tower import backends, dispatch
    from fp8tower.nn.linear import fp8_linear
    from fp8tower.problem import GemmProblem
    from fp8tower.tuning import cache as tcache

    monkeypatch.delenv("FP8TOWER_HOST_TIE", raising=False)
    monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FP8TOWER_TUNE", "0")
    n, k, m = 2048, 4096, 1
    g = torch.Generator(device="cuda").manual_seed(65)
    w = quantize_weight(torch.randn(n, k, device="cuda", generator=g) * 0.02, scheme,
                        act_scale=0.02 if scheme is Scheme.PER_TENSOR else None)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    p = GemmProblem.for_call(x, w, torch.bfloat16)
    triton, lt = backends.get("triton"), backends.get("cublaslt")
    cands = [tcache.Measurement("cublaslt", None, 10.0, 10.0, 0.0, 1.0),
             tcache.Measurement("triton", tcache.normalize_config(triton.default_config(p)),
                                10.1, 10.1, 0.0, 1.0)]
    e = tcache.Entry(p, "triton", cands[1].config, "2026-12-07T00:00:00+00:00", cands)
    tcache.DecisionCache.for_device(tmp_path, torch.cuda.get_device_name()).save({e.key: e})
    runs = []

    def run(*a, **kw):
        runs.append(kw["config"])
        return lt.run(*a, **kw)

    monkeypatch.setitem(backends._load(), "cublaslt", dataclasses.replace(lt, run=run))
    dispatch.reset()
    try:
        assert dispatch.resolve(p)[0].name == "triton"
        assert dispatch.resolve(p, graph=True)[0].name == "cublaslt"
        planned, plain = _planned_and_plain(w, None, "auto")
        want = plain(x)
        torch.testing.assert_close(planned(x), want, rtol=1e-2, atol=1e-2)
        (entry,) = planned._plans.values()
        assert entry.eager_only and entry.plan.backend.name == "triton"
        assert len(runs) == 1  # the plan's first call loaded the graph's choice
        planned(x)
        assert len(runs) == 1  # eager calls: Triton's plan
        _graph_replay_matches(planned, plain, m, k, g, rtol=1e-2, atol=1e-2)
        assert len(runs) == 2  # captured: cuBLASLt
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):  # the layer's weight: cuBLASLt's form prepared by warm
            y = fp8_linear(x, planned.fp8_weight())
        graph.replay()
        assert len(runs) == 3
        torch.testing.assert_close(y, want, rtol=1e-2, atol=1e-2)
    finally:
        dispatch.reset()
