"""Cached launch plans (plan.py, Fp8Linear's eager hot path): same results as the unplanned
path, reused while valid, rebuilt when the module moves, loads, is edited in place, or a
dispatch decision changes. Reference backend on the CPU; Triton under TRITON_INTERPRET=1
(the direct CompiledKernel launch is GPU-only: tests/test_gpu.py checks it)."""

import pytest
import torch
from fp8helpers import exact_activations, fake_blockwise_api, random_weight
from torch import nn

from fp8tower import dispatch
from fp8tower.formats import Scheme
from fp8tower.nn.linear import Fp8Linear

SCHEMES = [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128, Scheme.WEIGHT_ONLY]


def _pair(scheme, n=96, k=160, bias=True, backend="reference", seed=1):
    lin = nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(random_weight(n, k, seed))
        if bias:
            lin.bias.copy_(torch.linspace(-1, 1, n))
    act = 0.05 if scheme is Scheme.PER_TENSOR else None
    planned = Fp8Linear.from_linear(lin, scheme, act_scale=act, backend=backend)
    plain = Fp8Linear.from_linear(lin, scheme, act_scale=act, backend=backend)
    plain.use_plans = False
    return planned, plain


def _x(shape, scheme, seed=0):
    m = 1
    for d in shape[:-1]:
        m *= d
    return exact_activations(m, shape[-1], scheme, seed=seed).reshape(shape).to(torch.bfloat16)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("shape", [(1, 160), (3, 160), (2, 1, 160)])
def test_planned_equals_unplanned_reference(scheme, shape):
    planned, plain = _pair(scheme)
    for seed in range(3):  # the first call builds the plan, the next ones reuse it
        x = _x(shape, scheme, seed)
        y = planned(x)
        assert y.shape == (*shape[:-1], 96)
        torch.testing.assert_close(y, plain(x), rtol=0, atol=0)
    assert len(planned._plans) == 1
    assert not plain._plans


def test_plan_reused_then_rebuilt_on_in_place_weight_edit():
    planned, plain = _pair(Scheme.CHANNEL_TOKEN)
    x = _x((1, 160), Scheme.CHANNEL_TOKEN)
    planned(x)
    entry = next(iter(planned._plans.values()))
    planned(x)
    assert next(iter(planned._plans.values())) is entry  # reused
    with torch.no_grad():
        planned.weight_scale.mul_(2)  # in place: the tensor is the same object
        plain.weight_scale.mul_(2)
    y = planned(x)
    assert next(iter(planned._plans.values())) is not entry
    torch.testing.assert_close(y, plain(x), rtol=0, atol=0)


def test_plan_rebuilt_on_in_place_weight_data_edit():
    planned, plain = _pair(Scheme.PER_TENSOR)
    x = _x((1, 160), Scheme.PER_TENSOR)
    before = planned(x)
    for mod in (planned, plain):
        with torch.no_grad():  # negating FP8 values is exact
            mod.weight.copy_((-mod.weight.float()).to(mod.weight.dtype))
    after = planned(x)
    assert not torch.equal(after, before)
    torch.testing.assert_close(after, plain(x), rtol=0, atol=0)


def test_plan_rebuilt_on_load_state_dict():
    a, _ = _pair(Scheme.BLOCK128, seed=1)
    b, _ = _pair(Scheme.BLOCK128, seed=2)
    x = _x((2, 160), Scheme.BLOCK128)
    ya, yb = a(x), b(x)
    assert not torch.equal(ya, yb)
    a.load_state_dict(b.state_dict())
    assert not a._plans  # dropped at load
    torch.testing.assert_close(a(x), yb, rtol=0, atol=0)


def test_plan_rebuilt_on_to_and_bias_assignment():
    planned, plain = _pair(Scheme.PER_TENSOR)
    x = _x((1, 160), Scheme.PER_TENSOR)
    planned(x)
    planned.to(torch.float32)  # a cast moves buffers: plans dropped, FP8 weight kept
    assert not planned._plans
    torch.testing.assert_close(planned(x), plain(x), rtol=0, atol=0)
    planned.bias = torch.zeros(96)
    plain.bias = torch.zeros(96)
    torch.testing.assert_close(planned(x), plain(x), rtol=0, atol=0)


def test_plan_follows_backend_out_dtype_and_dispatch_changes():
    planned, _ = _pair(Scheme.WEIGHT_ONLY)
    x = _x((1, 160), Scheme.WEIGHT_ONLY)
    planned(x)
    planned.out_dtype = torch.float32
    assert not planned._plans
    assert planned(x).dtype == torch.float32
    entry = next(iter(planned._plans.values()))
    dispatch.reset()  # a dispatch decision may have changed
    planned(x)
    assert next(iter(planned._plans.values())) is not entry


def test_no_plan_for_large_m_or_non_contiguous():
    planned, plain = _pair(Scheme.CHANNEL_TOKEN)
    x = _x((65, 160), Scheme.CHANNEL_TOKEN)
    torch.testing.assert_close(planned(x), plain(x), rtol=0, atol=0)
    xt = _x((160, 2), Scheme.CHANNEL_TOKEN).t()  # (2, 160) with strides (1, 2)
    torch.testing.assert_close(planned(xt), plain(xt.contiguous()), rtol=0, atol=0)
    assert not planned._plans


def test_plans_off_by_env(monkeypatch):
    monkeypatch.setenv("FP8TOWER_PLAN", "0")
    planned, _ = _pair(Scheme.PER_TENSOR)
    assert planned.use_plans is False


def test_deepcopy_drops_plans():
    import copy

    planned, plain = _pair(Scheme.PER_TENSOR)
    x = _x((1, 160), Scheme.PER_TENSOR)
    planned(x)
    twin = copy.deepcopy(planned)
    assert not twin._plans
    torch.testing.assert_close(twin(x), plain(x), rtol=0, atol=0)


@pytest.mark.parametrize("scheme", SCHEMES)
@pytest.mark.parametrize("m", [1, 3])
def test_planned_equals_unplanned_triton_interpreter(interpret, scheme, m):
    planned, plain = _pair(scheme, n=80, k=384, backend="triton")
    for seed in range(2):
        x = _x((m, 384), scheme, seed)
        torch.testing.assert_close(planned(x), plain(x), rtol=0, atol=0)
    (entry,) = planned._plans.values()
    assert entry.plan.backend.name == "triton"
    # The interpreter has no compiled kernel: every launch takes triton's generic path.
    assert entry.plan.direct_launches == 0
    assert sum(d.generic_launches for d in entry.plan.launches) >= 2


@pytest.mark.parametrize("m", [1, 3])
def test_triton_plan_of_weight_only_split_per_token(interpret, m):
    """A plan of the per-token split (config wo_mode 3: its pre-pass gives one scale a row)
    equals the unplanned call, bit for bit."""
    from fp8tower.backends import triton_gemm
    from fp8tower.nn import plan

    planned, _ = _pair(Scheme.WEIGHT_ONLY, n=80, k=384, backend="triton", bias=False)
    weight, be = planned.fp8_weight(), triton_gemm.BACKEND
    packed = be.packed_for(weight)
    cfg = {"block_n": 64, "block_k": 128, "split_k": 2, "num_warps": 4, "num_stages": 2,
           "prequant": True, "wo_mode": 3}
    x = _x((m, 384), Scheme.WEIGHT_ONLY)
    p = plan._triton_plan(x, weight, packed, be, cfg, bias=None, out_dtype=torch.bfloat16,
                          out_shape=(m, 80))
    for seed in range(2):  # the second call reuses the plan's buffers
        x = _x((m, 384), Scheme.WEIGHT_ONLY, seed)
        want = triton_gemm._run(x, weight, packed, config=cfg)
        torch.testing.assert_close(p(x), want, rtol=0, atol=0)


def test_triton_plan_sees_in_place_scale_edit(interpret):
    # Triton's prepared weight holds a derived copy of the scales (an (N,) vector): a stale
    # plan would keep the old values.
    planned, plain = _pair(Scheme.PER_TENSOR, n=80, k=384, backend="triton")
    x = _x((1, 384), Scheme.PER_TENSOR)
    planned(x)
    for mod in (planned, plain):
        with torch.no_grad():
            mod.weight_scale.mul_(2)
    torch.testing.assert_close(planned(x), plain(x), rtol=0, atol=0)


# ------------------------------------------------------------ quant-first plans (cuBLASLt, CUTLASS)


@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128])
def test_quant_first_plan_hands_the_backend_fp8_x_and_its_scales(interpret, scheme):
    """The plan of a backend that takes FP8 activations quantizes x in its own launch and
    passes (FP8 x, scales) on; the backend's result equals the reference's on bf16 x."""
    from fp8tower.backends import Backend
    from fp8tower.backends.reference import fp8_linear_ref
    from fp8tower.formats import FP8_DTYPE, dequantize, dequantize_activation
    from fp8tower.nn import plan

    planned, _ = _pair(scheme, bias=False)
    weight = planned.fp8_weight()
    seen = []

    def run(x, weight, packed, *, act_scale=None, bias=None, out_dtype=torch.bfloat16,
            config=None, out=None):
        seen.append((x.dtype, tuple(act_scale.shape)))
        xd = dequantize_activation(x, act_scale, weight.scheme)
        return (xd @ dequantize(weight, torch.float32).t()).to(out_dtype)

    fake = Backend(name="cutlass", kernel_family="", description="", unavailable_reason=lambda: None,
                   check=lambda p: None, prepare=lambda w: None, run=run)
    assert "cutlass" in plan.QUANT_FIRST
    p = plan._quant_first_plan(_x((3, 160), scheme, 0), weight, None, fake, None, bias=None,
                               out_dtype=torch.bfloat16, out_shape=(3, weight.n))
    for seed in range(2):  # the second call reuses the plan's buffers
        x = _x((3, 160), scheme, seed)
        torch.testing.assert_close(p(x), fp8_linear_ref(x, weight), rtol=0, atol=0)
    want = {Scheme.PER_TENSOR: (), Scheme.CHANNEL_TOKEN: (3,), Scheme.BLOCK128: (3, 2)}[scheme]
    assert seen == [(FP8_DTYPE, want)] * 2


@pytest.mark.parametrize("scheme,m", [(Scheme.BLOCK128, 3), (Scheme.BLOCK128, 16),
                                      (Scheme.PER_TENSOR, 5)], ids=str)
def test_cublaslt_plan_writes_its_layouts_in_the_quant_launch(interpret, monkeypatch, scheme, m):
    """cuBLASLt's plan hands F.scaled_mm x padded to 16 rows with M-major 1x128 scales
    (block128), and _scaled_mm per_tensor's static scale as (M, 1) rows where the weight has a
    scale a channel, all written by its one quant launch: the backend adds no launch (cat,
    copy, contiguous) of its own, and the rows match the reference (block-wise GEMM faked:
    the CPU has none; _scaled_mm's CPU build for per_tensor)."""
    import dataclasses

    from torch.utils._python_dispatch import TorchDispatchMode

    from fp8tower import backends
    from fp8tower.backends import cublaslt
    from fp8tower.backends.reference import fp8_linear_ref
    from fp8tower.formats import Fp8Weight, dequantize
    from fp8tower.nn import plan

    got, ops, inside = {}, [], [False]

    def gemm(a, b, sa, sb):
        xs = sa.repeat_interleave(128, 1)[:, : a.shape[1]]
        return (a.float() * xs) @ dequantize(w, torch.float32).t()

    class Count(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not inside[0]:
                ops.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    monkeypatch.setattr(cublaslt, "_blockwise_api", lambda: fake_blockwise_api(got, gemm, inside))
    planned, _ = _pair(scheme, n=96, k=256, bias=False)
    w = planned.fp8_weight()
    if scheme is Scheme.PER_TENSOR:  # a merged group's: a scale a channel
        w = Fp8Weight(w.data, torch.linspace(0.5, 2, 96) * w.scale.float(), scheme, w.act_scale)
    be = backends.get("cublaslt")

    def counted(*args, **kw):  # the backend's own aten calls (the quant launch's are not)
        with Count():
            return cublaslt._run(*args, **kw)

    be = dataclasses.replace(be, run=counted)
    x0 = _x((m, 256), scheme, 0)
    p = plan._quant_first_plan(x0, w, be.prepare(w), be, None, bias=None,
                               out_dtype=torch.bfloat16, out_shape=(m, 96))
    for seed in range(2):
        x = _x((m, 256), scheme, seed)
        ops.clear()
        y = p(x)
        want = fp8_linear_ref(x, w)
        assert y.shape == (m, 96)
        torch.testing.assert_close(y.float(), want.float(), rtol=2e-2, atol=2e-2)
        glue = [o for o in ops if o in ("cat", "copy_", "clone", "new_zeros", "zeros", "ones")]
        assert not glue, ops
    if scheme is Scheme.BLOCK128:
        assert got == {"a": (16, 256), "sa": ((16, 2), (1, 16))}


# ------------------------------------------------------------ eager one-launch plans


def test_eager_one_launch_twin(interpret):
    """Eager channel_token / block128 calls at M <= 16 take the Triton GEMM that quantizes x
    itself; per_tensor only where its Triton choice takes the pre-pass (the same tile then
    quantizes x itself); larger M and an explicitly named non-Triton backend keep theirs."""
    from fp8tower import backends
    from fp8tower.kernels import configs as kc
    from fp8tower.nn.plan import EAGER_ONE_LAUNCH_MAX_M, eager_one_launch
    from fp8tower.problem import GemmProblem

    triton, ref = backends.get("triton"), backends.get("reference")
    # (channel_token at M = 1 defaults to one launch already: kernels/configs.FUSED_AMAX_MAX_M)
    for scheme, extra in ((Scheme.CHANNEL_TOKEN, {"fused_amax": True}), (Scheme.BLOCK128, {})):
        p = GemmProblem(2, 4096, 4096, scheme, capability=(9, 0))
        base = kc.default_config(p)
        assert kc.x_is_fp8(scheme, False, base)  # the default takes the pre-pass
        assert base["pdl"] and base["prefetch"]  # the pre-pass pair runs with PDL
        be, cfg = eager_one_launch(p, triton, base, "auto")
        plain = {k: v for k, v in base.items() if k not in ("pdl", "prefetch")}
        assert be is triton and cfg == {**plain, "prequant": False, **extra}
        assert not kc.x_is_fp8(scheme, False, cfg)
        assert eager_one_launch(p, ref, None, "auto")[1] == cfg  # another winner: Triton's default tile
        assert eager_one_launch(p, triton, cfg, "auto") is None  # already one launch
        assert eager_one_launch(p, ref, None, "reference") is None  # named: kept
        big = GemmProblem(EAGER_ONE_LAUNCH_MAX_M + 1, 4096, 4096, scheme, capability=(9, 0))
        assert eager_one_launch(big, triton, kc.default_config(big), "auto") is None
    p = GemmProblem(1, 4096, 4096, Scheme.PER_TENSOR, capability=(9, 0), static_act_scale=True)
    own = kc.default_config(p)
    assert not kc.x_is_fp8(Scheme.PER_TENSOR, False, own)  # x quantized in the GEMM
    assert eager_one_launch(p, triton, own, "auto") is None
    for m in (1, 8, EAGER_ONE_LAUNCH_MAX_M):  # small_m_deep (the H100, M <= 8), deep_default
        p = GemmProblem(m, 4096, 4096, Scheme.PER_TENSOR, capability=(9, 0),
                        static_act_scale=True)
        pair = kc.small_m_deep(p) if m <= 8 else kc.default_config(p)
        assert pair["prequant"] and pair["pdl"] and pair["prefetch"], (m, pair)
        be, cfg = eager_one_launch(p, triton, pair, "auto")
        plain = {k: v for k, v in pair.items() if k not in ("pdl", "prefetch")}
        assert be is triton and cfg == {**plain, "prequant": False}, m
        assert eager_one_launch(p, triton, cfg, "auto") is None
        assert eager_one_launch(p, ref, None, "auto") is None  # another backend: its choice
        assert eager_one_launch(p, triton, pair, "reference") is None
    big = GemmProblem(EAGER_ONE_LAUNCH_MAX_M + 1, 4096, 4096, Scheme.PER_TENSOR,
                      capability=(9, 0), static_act_scale=True)
    assert eager_one_launch(big, triton, {**pair, "block_n": 128}, "auto") is None
    p = GemmProblem(1, 4096, 4096, Scheme.CHANNEL_TOKEN, capability=(9, 0))
    assert not kc.x_is_fp8(Scheme.CHANNEL_TOKEN, False, kc.default_config(p))
    assert eager_one_launch(p, triton, kc.default_config(p), "auto") is None


def test_eager_one_launch_twin_of_weight_only(interpret, monkeypatch):
    """weight_only: an eager call at M = 1 whose Triton choice splits x per token by the
    pre-pass (wo_mode 3) runs that split in the GEMM (wo_mode 4: one launch, the same bits);
    the split per 1x128 group, other M and other backends keep their choice."""
    from fp8tower import backends
    from fp8tower.backends import triton_gemm
    from fp8tower.kernels import configs as kc
    from fp8tower.nn.plan import eager_one_launch
    from fp8tower.problem import GemmProblem

    triton, ref = backends.get("triton"), backends.get("reference")
    token = {"block_n": 64, "block_k": 128, "split_k": 2, "num_warps": 4, "num_stages": 2,
             "prequant": True, "wo_mode": 3, **kc.PDL_PAIR}
    p = GemmProblem(1, 4096, 4096, Scheme.WEIGHT_ONLY, capability=(9, 0))
    be, cfg = eager_one_launch(p, triton, token, "auto")
    plain = {k: v for k, v in token.items() if k not in ("pdl", "prefetch")}
    assert be is triton and cfg == {**plain, "prequant": False, "wo_mode": 4}
    group = {k: v for k, v in token.items() if k != "wo_mode"}
    assert eager_one_launch(p, triton, group, "auto") is None
    assert eager_one_launch(p, triton, cfg, "auto") is None  # already one launch
    assert eager_one_launch(p, ref, None, "auto") is None
    p2 = GemmProblem(2, 4096, 4096, Scheme.WEIGHT_ONLY, capability=(9, 0))
    assert eager_one_launch(p2, triton, token, "auto") is None

    # through Fp8Linear: the twin runs, one launch, the dispatch choice's bits
    planned, _ = _pair(Scheme.WEIGHT_ONLY, n=80, k=384, backend="auto")
    from fp8tower import dispatch

    monkeypatch.setattr(dispatch, "resolve", lambda problem, backend, graph=False: (triton, token))
    x = _x((1, 384), Scheme.WEIGHT_ONLY)
    y = planned(x)
    (entry,) = planned._plans.values()
    assert entry.eager_only and len(entry.plan.launches) == 1
    weight = planned.fp8_weight()
    want = triton_gemm._run(x, weight, triton.packed_for(weight), bias=planned.bias,
                            config=token)
    torch.testing.assert_close(y, want, rtol=0, atol=0)


@pytest.mark.parametrize("scheme", [Scheme.CHANNEL_TOKEN, Scheme.BLOCK128, Scheme.PER_TENSOR])
def test_eager_one_launch_plan_equals_the_pre_pass_pair(interpret, scheme, monkeypatch):
    """The eager plan's single launch gives the unplanned (pre-pass + GEMM) bits. per_tensor:
    dispatch choosing a tile with x from the pre-pass pair (as the H100's small_m_deep)."""
    from fp8tower.kernels import configs as kc

    planned, plain = _pair(scheme, n=80, k=384, backend="triton")
    if scheme is Scheme.PER_TENSOR:
        from fp8tower import backends, dispatch

        deep = {"block_n": 64, "block_k": 128, "split_k": 1, "num_warps": 4, "num_stages": 2,
                "prequant": True, **kc.PDL_PAIR}
        triton = backends.get("triton")
        monkeypatch.setattr(dispatch, "resolve",
                            lambda problem, backend, graph=False: (triton, deep))
    for seed in range(2):
        x = _x((2, 1, 384), scheme, seed)
        torch.testing.assert_close(planned(x), plain(x), rtol=0, atol=0)
    (entry,) = planned._plans.values()
    assert entry.eager_only and len(entry.plan.launches) == 1
    # the interpreter's plans launch no separate quant: the config says x is quantized in it
    assert not kc.x_is_fp8(scheme, False, entry.plan.config)


def test_eager_one_launch_fits_fp32_x_in_shared_memory(interpret):
    """x quantized in the GEMM is staged as it comes: fp32 x on the deep tile's 4 stages
    would outgrow shared memory at M > 1 (238,592 B compiled for sm_90 against 232,448), so
    its twin runs fewer; bf16 x keeps the pair's stages."""
    from fp8tower import backends
    from fp8tower.kernels import configs as kc
    from fp8tower.nn.plan import eager_one_launch
    from fp8tower.problem import GemmProblem

    triton = backends.get("triton")
    for scheme in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN):
        for dtype, stages in ((torch.bfloat16, 4), (torch.float16, 4), (torch.float32, 3)):
            p = GemmProblem(8, 4096, 4096, scheme, capability=(9, 0), act_dtype=dtype,
                            static_act_scale=scheme is Scheme.PER_TENSOR)
            pair = kc.deep_tile(p, {"prequant": True, **kc.PDL_PAIR})
            assert pair["num_stages"] == 4
            be, cfg = eager_one_launch(p, triton, pair, "auto")
            assert be is triton and cfg["num_stages"] == stages, (scheme, dtype)
            assert kc.smem_bytes(cfg, kc.block_m_for(8), dtype.itemsize) <= kc.SMEM_BUDGET


def test_a_captured_eager_only_call_runs_the_plan_of_the_graphs_choice(interpret, monkeypatch):
    """Where a CUDA graph runs another choice than the eager plan (its one-launch twin, or a
    tie the graph takes otherwise), the plan holds a plan of the graph's choice, exactly it
    (no twin), its first call runs that once (warm), and a captured call of the module runs
    it, pinned. Before session 66 the captured call ran the choice unplanned, whose CUTLASS
    path quantizes x without the plan's PDL (a 27B step 1.020x slower at M = 32 on an H100,
    results/session66_2026-12-07/tie/). On the CPU, graph_choice stands in for the GPU's
    resolution and _forward_captured for a capture."""
    import dataclasses

    from fp8tower import backends, dispatch
    from fp8tower.kernels import configs as kc
    from fp8tower.nn import plan

    scheme = Scheme.CHANNEL_TOKEN
    triton, ref = backends.get("triton"), backends.get("reference")
    pair = {"block_n": 64, "block_k": 128, "split_k": 1, "num_warps": 4, "num_stages": 2,
            "prequant": True, **kc.PDL_PAIR}
    runs = []

    def run(*a, **kw):
        runs.append(kw["config"])
        return ref.run(*a, **kw)

    spy = dataclasses.replace(ref, run=run)
    monkeypatch.setattr(dispatch, "resolve", lambda problem, backend, graph=False: (triton, pair))
    for graph, launches in (((triton, pair), 0), ((spy, None), 1)):
        monkeypatch.setattr(plan, "graph_choice", lambda problem, backend, x2, g=graph: g)
        planned, plain = _pair(scheme, n=80, k=384, backend="auto")
        x = _x((2, 384), scheme)
        runs.clear()
        want = plain(x)
        torch.testing.assert_close(planned(x), want, rtol=0, atol=0)
        (entry,) = planned._plans.values()
        assert entry.eager_only and not kc.x_is_fp8(scheme, False, entry.plan.config)
        g = entry.plan.graph
        assert (g.backend, g.config) == graph and not g.eager_only and g.graph is None
        assert entry.plan.warm == g.run and len(runs) == launches  # warm ran it once
        y = planned._forward_captured(x, entry)
        assert len(runs) == 2 * launches and entry.pinned and entry in planned._pinned
        if graph[0] is spy:  # the reference's own bits (another sum order than Triton's)
            w = planned.fp8_weight()
            want = ref.run(x, w, ref.packed_for(w), act_scale=None, bias=planned.bias,
                           out_dtype=torch.bfloat16, config=None)
        torch.testing.assert_close(y, want, rtol=0, atol=0)


def test_eager_one_launch_can_be_turned_off(interpret, monkeypatch):
    """FP8TOWER_EAGER_ONE_LAUNCH=0, or plans built inside same_kernels_as_graphs() (an eager
    step that labels a graph replay's kernels), keep the dispatch choice: the pre-pass too."""
    from fp8tower.nn import plan

    # M = 2: channel_token's default at M = 1 is one launch already, so eager_only would be
    # False without the context manager too (the audit of session 34)
    planned, _ = _pair(Scheme.CHANNEL_TOKEN, n=80, k=384, backend="triton")
    free, _ = _pair(Scheme.CHANNEL_TOKEN, n=80, k=384, backend="triton")
    free(_x((2, 384), Scheme.CHANNEL_TOKEN))
    assert next(iter(free._plans.values())).eager_only  # what the context manager turns off
    with plan.same_kernels_as_graphs():
        planned(_x((2, 384), Scheme.CHANNEL_TOKEN))
    assert plan.eager_one_launch_enabled()  # restored on exit
    (entry,) = planned._plans.values()
    assert not entry.eager_only
    monkeypatch.setenv("FP8TOWER_EAGER_ONE_LAUNCH", "0")
    assert not plan.eager_one_launch_enabled()
    other, _ = _pair(Scheme.BLOCK128, n=80, k=384, backend="triton")
    other(_x((1, 384), Scheme.BLOCK128))
    (entry,) = other._plans.values()
    assert not entry.eager_only


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_plan_keeps_no_activation_alive(interpret, scheme):
    """A plan's launches take each call's x and y: none keeps the first call's storage (a
    review, 2026-12-06: under torch.compile(mode="reduce-overhead") that x lives in the
    graph's pool, and the warm-up refuses to record while anything outside holds it)."""
    planned, plain = _pair(scheme, n=80, k=384, backend="triton")
    x = _x((2, 384), scheme)
    want = plain(x)
    y = planned(x)
    torch.testing.assert_close(y, want, rtol=0, atol=0)
    (entry,) = planned._plans.values()
    held = [a for d in entry.plan.launches for a in d.args if isinstance(a, torch.Tensor)]
    ptrs = {x.untyped_storage().data_ptr(), y.untyped_storage().data_ptr()}
    assert entry.plan.launches and not [a for a in held if a.untyped_storage().data_ptr() in ptrs]
    torch.testing.assert_close(planned(_x((2, 384), scheme)), want, rtol=0, atol=0)
