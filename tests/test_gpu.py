"""The numerics contract on the GPU, on every Qwen3.5-27B tower shape (marker: gpu).

General random activations here (the CPU tests need grid-exact ones, see conftest)."""

import pytest
import torch

from fp8tower import backends
from fp8tower.backends.reference import fp8_linear_ref
from fp8tower.formats import Scheme, quantize_weight, sqnr_db
from fp8tower.problem import GemmProblem

pytestmark = pytest.mark.gpu

TOWER_SHAPES = [
    (10240, 5120), (6144, 5120), (16384, 5120), (5120, 6144), (12288, 5120),
    (1024, 5120), (14336, 5120), (34816, 5120), (5120, 17408),
]
# 1152x1280: K/128 = 10 is not a multiple of 4, which cuBLASLt's block-wise scales pad to.
ODD_SHAPES = [(200, 328), (1000, 1160), (1152, 1280)]


def _setup(n, k, scheme, m, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.02
    act = 0.02 if scheme is Scheme.PER_TENSOR else None
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    return quantize_weight(w, scheme, act_scale=act), x


@pytest.mark.parametrize("shape", TOWER_SHAPES + ODD_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("scheme", list(Scheme))
@pytest.mark.parametrize("m", [1, 3, 16, 33, 64])
def test_backends_vs_reference(shape, scheme, m):
    n, k = shape
    w, x = _setup(n, k, scheme, m, seed=m)
    ref = fp8_linear_ref(x, w, out_dtype=torch.float64, compute_dtype=torch.float64)
    problem = GemmProblem.for_call(x, w, torch.bfloat16)
    served = 0
    for be in backends.available():
        if be.name == "reference" or be.check(problem) is not None:
            continue
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        be.run(x, w, be.packed_for(w), out_dtype=torch.bfloat16, out=out)
        torch.cuda.synchronize()
        db = sqnr_db(ref, out)
        # bf16 output rounding alone costs ~50 dB; 40 dB is the contract.
        assert db >= 40, f"{be.name} {scheme} {n}x{k} M={m}: {db:.1f} dB"
        served += 1
    assert served >= 1


@pytest.mark.parametrize("shape", [(5120, 6144), (16384, 5120), (1024, 5120), (1040, 5200)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("m", [1, 3, 16, 33, 64])
def test_cutlass_block128_every_config_vs_reference(shape, m):
    """Every blockwise CUTLASS config (ping-pong, cooperative, split-K 2-4) against the
    float64 reference: 1040x5200 has a partial last 128-row block (a 64-row group alone) and
    a partial last K group; and each config gives the Triton pair's SQNR within 1 dB."""
    from fp8tower.backends import cutlass

    be = backends.get("cutlass")
    if be.unavailable_reason():
        pytest.skip(be.unavailable_reason())
    n, k = shape
    w, x = _setup(n, k, Scheme.BLOCK128, m, seed=7 + m)
    ref = fp8_linear_ref(x, w, out_dtype=torch.float64, compute_dtype=torch.float64)
    problem = GemmProblem.for_call(x, w, torch.bfloat16)
    triton = backends.get("triton")
    tdb = sqnr_db(ref, triton.run(x, w, triton.packed_for(w), out_dtype=torch.bfloat16))
    for cfg in be.configs(problem):
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        be.run(x, w, be.packed_for(w), out_dtype=torch.bfloat16, out=out, config=cfg)
        torch.cuda.synchronize()
        db = sqnr_db(ref, out)
        name = f"{cutlass.spec_of(cfg).name} {cfg['mode']}/{cfg['splits']} {n}x{k} M={m}"
        assert db >= 40 and db >= tdb - 1, f"{name}: {db:.1f} dB (Triton {tdb:.1f})"


@pytest.mark.parametrize("shape", TOWER_SHAPES + ODD_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("m", [1, 3, 16, 33, 64])
def test_weight_only_split_prepass_vs_reference(shape, m):
    """weight_only with x split by the pre-pass into two FP8 rows a token (config
    "prequant", the default up to M = 64), scaled per 1x128 group or per token (wo_mode 3;
    at M = 1 also that split in the GEMM, wo_mode 4, the same bits): the contract's 40 dB,
    and within 6 dB of the SQNR of W upcast in the GEMM (bf16 MMAs on the same tile)."""
    from fp8tower.kernels.configs import PDL_PAIR, default_config

    n, k = shape
    w, x = _setup(n, k, Scheme.WEIGHT_ONLY, m, seed=m)
    ref = fp8_linear_ref(x, w, out_dtype=torch.float64, compute_dtype=torch.float64)
    be = backends.get("triton")
    base = default_config(GemmProblem.for_call(x, w, torch.bfloat16))
    tile = {f: base[f] for f in ("block_n", "block_k", "split_k", "num_warps", "num_stages")}
    upcast, split = {**tile, "prequant": False}, {**tile, "prequant": True, **PDL_PAIR}
    dbs, outs = [], []
    modes = [upcast, split, {**split, "wo_mode": 3}]
    if m == 1:  # the per-token split in the GEMM
        modes.append({**split, "prequant": False, "wo_mode": 4})
    for cfg in modes:
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        be.run(x, w, be.packed_for(w), out_dtype=torch.bfloat16, config=cfg, out=out)
        torch.cuda.synchronize()
        dbs.append(sqnr_db(ref, out))
        outs.append(out)
    assert min(dbs[1:]) >= 40 and min(dbs[1:]) >= dbs[0] - 6, \
        f"{n}x{k} M={m}: upcast / split per group / per token (pre-pass, GEMM) {dbs}"
    assert m > 1 or torch.equal(outs[2], outs[3]), f"{n}x{k}: wo_mode 3 and 4 differ"


@pytest.mark.parametrize("shape", [(16384, 5120), (14336, 5120), (5120, 6144)],
                         ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.BLOCK128])
@pytest.mark.parametrize("m", [8, 13, 32, 33])
def test_triton_priority_configs_vs_reference(shape, scheme, m):
    """Every config the tuner times first (kernels.configs.priority_configs: from M = 8 the
    BLOCK_N 128 tile with x quantized in the GEMM, wide_in_gemm) against the reference."""
    from fp8tower.kernels import configs as kc

    be = backends.get("triton")
    n, k = shape
    w, x = _setup(n, k, scheme, m, seed=11 + m)
    ref = fp8_linear_ref(x, w, out_dtype=torch.float64, compute_dtype=torch.float64)
    problem = GemmProblem.for_call(x, w, torch.bfloat16)
    prio = kc.priority_configs(problem)
    assert any(c["block_n"] == 128 for c in prio)
    for cfg in prio:
        out = torch.full((m, n), float("nan"), dtype=torch.bfloat16, device="cuda")
        be.run(x, w, be.packed_for(w), out_dtype=torch.bfloat16, out=out, config=cfg)
        torch.cuda.synchronize()
        db = sqnr_db(ref, out)
        assert db >= 40, f"{cfg} {scheme} {n}x{k} M={m}: {db:.1f} dB"


@pytest.mark.parametrize("scheme", list(Scheme))
def test_triton_bitwise_deterministic(scheme):
    be = backends.get("triton")
    w, x = _setup(5120, 17408, scheme, 8)
    cfg = {"block_n": 64, "block_k": 256, "split_k": 8, "num_warps": 4, "num_stages": 4}
    packed = be.packed_for(w)
    outs = [be.run(x, w, packed, out_dtype=torch.bfloat16, config=cfg) for _ in range(20)]
    assert all(torch.equal(outs[0], o) for o in outs[1:])
    assert int(packed["counters"].abs().sum()) == 0


def test_triton_under_cuda_graph():
    be = backends.get("triton")
    w, x = _setup(1024, 5120, Scheme.PER_TENSOR, 4)
    cfg = {"block_n": 32, "block_k": 256, "split_k": 4, "num_warps": 4, "num_stages": 4}
    packed = be.packed_for(w)
    eager = be.run(x, w, packed, out_dtype=torch.bfloat16, config=cfg)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = be.run(x, w, packed, out_dtype=torch.bfloat16, config=cfg)
    for _ in range(3):
        g.replay()
    torch.cuda.synchronize()
    assert torch.equal(eager, y)


@pytest.mark.parametrize("mode", ["default", "reduce-overhead"])
def test_compiled_fp8linear_matches_eager(mode):
    """torch.compile (inductor; reduce-overhead adds CUDA graphs) runs the same kernels."""
    from fp8tower.nn.linear import Fp8Linear

    torch._dynamo.reset()
    w, x = _setup(1024, 5120, Scheme.PER_TENSOR, 4)
    mod = Fp8Linear.from_weight(w, backend="triton")
    eager = mod(x)
    compiled = torch.compile(mod, mode=mode, fullgraph=True)
    for _ in range(3):  # reduce-overhead: warm-up runs, then the captured graph replays
        y = compiled(x)
    torch.cuda.synchronize()
    assert torch.equal(eager, y)


@pytest.mark.parametrize("scheme", list(Scheme), ids=str)
@pytest.mark.parametrize("backend", ["triton", "auto"])
def test_compile_reduce_overhead_as_first_call(scheme, backend):
    """A module's very first call inside torch.compile(mode="reduce-overhead"): its lazy state
    (packed weight, launch plans, scratch) is made during warm-up or capture, not by an eager
    call before; replays then match the float64 reference, and an eager call after them.
    Its x is made inside the graph, so in the warm-up it lives in the graph's pool (a plan
    that kept its first x failed there; a review, 2026-12-06)."""
    from fp8tower.nn.linear import Fp8Linear

    torch._dynamo.reset()
    w, x = _setup(1024, 5120, scheme, 4, seed=7)
    mod = Fp8Linear.from_weight(w, backend=backend)
    compiled = torch.compile(lambda t: mod(t * 2), mode="reduce-overhead", fullgraph=True)
    outs = [compiled(x).clone() for _ in range(4)]
    torch.cuda.synchronize()
    x = x * 2
    ref = fp8_linear_ref(x, w, out_dtype=torch.float64, compute_dtype=torch.float64)
    for i, y in enumerate(outs):
        assert sqnr_db(ref, y) >= 40, f"call {i}: {sqnr_db(ref, y):.1f} dB"
    assert all(torch.equal(outs[1], y) for y in outs[2:])
    assert sqnr_db(ref, mod(x)) >= 40


@pytest.mark.parametrize("scheme", list(Scheme), ids=str)
@pytest.mark.parametrize("m", [1, 5])
def test_triton_takes_x_with_any_column_stride_on_gpu(scheme, m):
    """x with a column stride (a transposed copy's view, strides (1, 2M)) gives the contiguous
    x's bits, in every way of taking x (the kernels read rows through stride(0) with unit
    column stride; _run copies a strided x; before, -2 dB on the CPU interpreter)."""
    from fp8tower.kernels import configs as kc

    be = backends.get("triton")
    n, k = 1024, 1280
    w, x = _setup(n, k, scheme, m, seed=21 + m)
    buf = torch.zeros(k, 2 * m, device="cuda", dtype=x.dtype)
    buf[:, :m] = x.t()
    xt = buf[:, :m].t()  # column stride 2m (a transposed copy's view, at M=1 too)
    assert torch.equal(xt, x) and xt.stride() == (1, 2 * m)
    base = kc.default_config(GemmProblem.for_call(x, w, torch.bfloat16))
    tile = {f: base[f] for f in ("block_n", "block_k", "split_k", "num_warps", "num_stages")}
    modes = [{**tile, "prequant": False}, {**tile, "prequant": True}]
    if scheme is Scheme.CHANNEL_TOKEN:
        modes.append({**tile, "prequant": False, "fused_amax": True})
    packed = be.packed_for(w)
    for cfg in modes:
        want = be.run(x, w, packed, out_dtype=torch.bfloat16, config=cfg)
        got = be.run(xt, w, packed, out_dtype=torch.bfloat16, config=cfg)
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=lambda s, c=cfg: f"{c}: {s}")


@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN], ids=str)
def test_cudnn_reads_a_strided_weight_as_its_values(scheme):
    """cuDNN's graph describes W as row-major (N, K): a strided Fp8Weight.data (a transposed
    copy's view) is packed contiguous (cudnn._prepare), so it gives the contiguous weight's
    bits; before, the graph read the strided bytes as row-major."""
    from fp8tower.formats import Fp8Weight

    be = backends.get("cudnn")
    if be.unavailable_reason():
        pytest.skip(be.unavailable_reason())
    n, k, m = 1024, 2048, 4
    w, x = _setup(n, k, scheme, m, seed=5)
    strided = Fp8Weight(w.data.t().contiguous().t(), w.scale, w.scheme, w.act_scale)
    assert not strided.data.is_contiguous()
    want = be.run(x, w, be.prepare(w), out_dtype=torch.bfloat16)
    got = be.run(x, strided, be.prepare(strided), out_dtype=torch.bfloat16)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
