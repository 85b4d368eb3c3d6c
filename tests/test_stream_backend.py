"""The stream backend (backends/stream.py, csrc/stream/fp8_stream_gemm.cu).

CPU: its reasons, checks, configs (shared-memory budget), the build key, and a real sm_90a
build where nvcc exists (CI has it: compile errors cost no GPU time). GPU (marker gpu):
numerics against the float64 reference on the same quantized operands for every x kind,
M in {1, 3, 8, 9, 16}, N and K that are not multiples of the tile, grids that split every
tile between CTAs (the stream-K reduction) and one CTA per tile; bits equal run to run and
in a CUDA graph; the PDL chain gives the same bits as plain launches."""

from __future__ import annotations

import pytest
import torch

from fp8tower import backends
from fp8tower.backends import stream
from fp8tower.backends.reference import fp8_linear_ref
from fp8tower.formats import FP8_DTYPE, Scheme, quantize_activation, quantize_weight, sqnr_db
from fp8tower.kernels.layout import tile_major
from fp8tower.problem import GemmProblem


def sm90(m=1, n=4096, k=4096, scheme="per_tensor", **kw):
    return GemmProblem(m, n, k, scheme, capability=(9, 0), static_act_scale=scheme == "per_tensor", **kw)


def test_registered_after_cublaslt():
    names = backends.names()
    assert "stream" in names and names.index("cublaslt") < names.index("stream")


def test_unavailable_reasons(monkeypatch):
    monkeypatch.setattr(stream, "nvcc_path", lambda: None)
    assert "nvcc" in stream.BACKEND.unavailable_reason()
    with pytest.raises(stream.StreamError, match="nvcc"):
        stream.library_path()


@pytest.mark.parametrize(("problem", "match"), [
    (sm90(m=17), "M <= 16"),
    (sm90(scheme="weight_only"), "not weight_only"),
    (sm90(k=4104), "multiple of 16"),
    (sm90(out_dtype=torch.float16), "bfloat16"),
    (GemmProblem(1, 64, 64, "per_tensor", capability=(8, 9)), "sm_90a"),
    (GemmProblem(1, 64, 64, "per_tensor"), "CUDA tensor"),
])
def test_check_names_the_reason(problem, match):
    assert match in stream.BACKEND.check(problem)


@pytest.mark.parametrize("scheme", ["per_tensor", "channel_token", "block128"])
@pytest.mark.parametrize("m", [1, 3, 16])
def test_serves_decode(scheme, m):
    assert stream.BACKEND.check(sm90(m=m, scheme=scheme, n=1000, k=1040)) is None


@pytest.mark.parametrize("scheme", ["per_tensor", "channel_token", "block128"])
@pytest.mark.parametrize("m", [1, 8, 16])
def test_configs_fit_shared_memory(scheme, m):
    p = sm90(m=m, scheme=scheme)
    cfgs = stream.BACKEND.configs(p)
    default = stream.BACKEND.default_config(p)
    assert default in cfgs and default["pdl"]
    xk = stream._x_kind(p)
    assert all(stream.fits(m, xk, c["stages"]) for c in cfgs)
    assert not stream.fits(m, xk, 8)  # the ring's stages are 33-38 KB


@pytest.mark.parametrize(("n", "k", "split"), [
    (16384, 5120, {"whole_tiles": True}),   # 128 tiles of 128 rows, one each
    (14336, 5120, {"whole_tiles": True}),   # 112
    (5120, 6144, {"whole_tiles": True}),    # 40 tiles, one each
    (34816, 5120, {}),                      # 272: 2 x 132 + 8, a small last round: stream-K
    (5120, 17408, {}),                      # long rows: stream-K over every SM
    (1024, 5120, {"min_iters": 4}),         # 16 tiles: stream-K, >= 4 steps a CTA
])
def test_default_work_split(n, k, split):
    cfg = stream.BACKEND.default_config(sm90(n=n, k=k))
    assert {key: cfg[key] for key in ("whole_tiles", "min_iters") if key in cfg} == split


def test_x_kind():
    assert stream._x_kind(sm90()) == stream.XK_FP8_TENSOR
    assert stream._x_kind(sm90(scheme="channel_token")) == stream.XK_FP8_TOKEN
    assert stream._x_kind(sm90(scheme="block128")) == stream.XK_FP8_BLOCK


def test_run_rejects_bad_input_before_any_launch():
    """Clear errors, raised before the library is loaded or anything is launched."""
    w = quantize_weight(torch.randn(64, 64) * 0.02, "channel_token")
    packed = stream.BACKEND.prepare(w)
    with pytest.raises(ValueError, match="M <= 16, got M=17"):
        stream.BACKEND.run(torch.randn(17, 64).bfloat16(), w, packed)
    with pytest.raises(ValueError, match="bfloat16 only"):
        stream.BACKEND.run(torch.randn(1, 64).bfloat16(), w, packed, out_dtype=torch.float16)
    with pytest.raises(ValueError, match="act_scale"):
        stream.BACKEND.run(torch.zeros(1, 64).to(FP8_DTYPE), w, packed)


def test_iteration_space():
    assert stream.tiles(16384) == 128 and stream.tiles(1000) == 8
    assert stream.iters(16384, 5120) == 128 * 20 and stream.iters(1000, 1040) == 8 * 5


@pytest.mark.parametrize("n,k", [(256, 512), (200, 5136), (130, 16)])
def test_pack_weight_is_the_kernels_layout(n, k):
    """What the kernel's tensor map reads: (tiles * kb * 256) rows of 128 bytes, 128-row x
    128-byte blocks tile-major with K padded to whole 256-wide steps (the layout itself:
    tests/test_tile_major.py)."""
    w = torch.randint(0, 255, (n, k), dtype=torch.uint8).view(torch.float8_e4m3fn)
    p = stream.pack_weight(w)
    assert p.shape == (stream.iters(n, k) * 256, 128) and p.dtype == torch.uint8
    assert torch.equal(p, tile_major(w.view(torch.uint8), 128, 128, k_multiple=256))


needs_nvcc = pytest.mark.skipif(stream.build_unavailable() is not None, reason="no nvcc")


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """The real nvcc build (all variants in one library), once for the module, in a fresh
    cache dir; the library loads without a GPU (nothing runs)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FP8TOWER_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        stream.library.cache_clear()
        path = stream.build()
        yield path, stream.library()
        stream.library.cache_clear()


@needs_nvcc
def test_builds_for_sm90a(built):
    path, _ = built
    assert path.is_file() and path.parent.name == "stream" and path.with_suffix(".json").is_file()
    assert stream.build() == path  # cached: same source, flags and nvcc
    syms = path.read_bytes()
    for name in (b"fp8t_stream_gemm", b"fp8t_stream_workspace", b"fp8t_stream_smem"):
        assert name in syms


@needs_nvcc
@pytest.mark.parametrize("xk", [1, 2, 3])
def test_shared_memory_mirror_matches_the_library(built, xk):
    """The configs are chosen from stream.smem_bytes without the library: it must say what
    the kernel allocates."""
    _, lib = built
    for m in (1, 3, 8, 16):
        for stages in stream.STAGES:
            assert lib.fp8t_stream_smem(m, xk, stages) == stream.smem_bytes(m, xk, stages)
    assert lib.fp8t_stream_iters(1000, 1040) == stream.iters(1000, 1040)


# ============================================================================ GPU

gpu = pytest.mark.gpu


def _operands(scheme, m, n, k, seed, fp8_x=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    w = torch.randn(n, k, device="cuda", generator=g) * 0.02
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    x[0, :: max(1, k // 7)] *= 40  # outliers: saturation at +-448 is exercised
    act = 0.02 if scheme is Scheme.PER_TENSOR else None
    wq = quantize_weight(w, scheme, act_scale=act)
    return wq, x


def _run(wq, x, config, act_scale=None, bias=None):
    be = stream.BACKEND
    y = torch.full((x.shape[0], wq.n), float("nan"), dtype=torch.bfloat16, device="cuda")
    return be.run(x, wq, be.packed_for(wq), act_scale=act_scale, bias=bias, config=config, out=y)


def _skip_unless_available():
    why = stream.BACKEND.unavailable_reason()
    if why is not None:
        pytest.skip(why)


GPU_SHAPES = [(4096, 4096), (1000, 1040), (200, 5136), (16384, 5120)]


@gpu
@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128], ids=str)
@pytest.mark.parametrize("m", [1, 3, 8, 9, 16])
@pytest.mark.parametrize("shape", GPU_SHAPES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("cfg", [{"stages": 6, "pdl": True},
                                 {"stages": 6, "pdl": True, "whole_tiles": True},
                                 {"stages": 4, "pdl": False, "min_iters": 4}],
                         ids=["s6c1pdl", "s6whole", "s4mi4"])
def test_numerics_vs_float64(scheme, m, shape, cfg):
    _skip_unless_available()
    n, k = shape
    wq, x = _operands(scheme, m, n, k, seed=n + k + m)
    bias = torch.randn(n, device="cuda") * 0.1
    ref = fp8_linear_ref(x, wq, bias=bias, out_dtype=torch.float64, compute_dtype=torch.float64)
    assert stream.fits(m, stream._x_kind(sm90(m=m, scheme=scheme)), cfg["stages"])
    y = _run(wq, x, cfg, bias=bias)
    torch.cuda.synchronize()
    assert not y.isnan().any()
    assert sqnr_db(ref, y) >= 40
    again = _run(wq, x, cfg, bias=bias)
    torch.testing.assert_close(again, y, rtol=0, atol=0)  # deterministic (split tiles too)


@gpu
@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128], ids=str)
@pytest.mark.parametrize("m", [1, 8])
def test_fp8_x_given(scheme, m):
    """FP8 x with its scales (what a launch plan or a caller hands over): same as bf16 x."""
    _skip_unless_available()
    n, k = 4096, 4096
    wq, x = _operands(scheme, m, n, k, seed=7)
    q, s = quantize_activation(x, scheme, wq.act_scale)
    y8 = _run(wq, q, {"stages": 4, "pdl": True}, act_scale=s)
    ref = fp8_linear_ref(x, wq, out_dtype=torch.float64, compute_dtype=torch.float64)
    assert sqnr_db(ref, y8) >= 40


@gpu
def test_small_grid_splits_every_tile():
    """A grid of 10 CTAs over 10 iterations: every tile summed by its last of 5 CTAs."""
    _skip_unless_available()
    n, k = 256, 1280  # 2 tiles x 5 steps
    wq, x = _operands(Scheme.PER_TENSOR, 3, n, k, seed=3)
    ref = fp8_linear_ref(x, wq, out_dtype=torch.float64, compute_dtype=torch.float64)
    y = _run(wq, x, {"stages": 4, "pdl": True})
    assert stream.iters(n, k) == 10
    assert sqnr_db(ref, y) >= 40
    # the counters were reset by each tile's last CTA: a second call is right too
    torch.testing.assert_close(_run(wq, x, {"stages": 4, "pdl": True}), y, rtol=0, atol=0)


@gpu
@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN], ids=str)
@pytest.mark.parametrize("between", [False, True], ids=["gemm_to_gemm", "elementwise_between"])
def test_pdl_chain_in_graph_equals_plain(scheme, between):
    """Ten GEMMs, each reading the previous one's output (directly, or through a torch
    elementwise kernel launched without PDL), launched with PDL in one CUDA graph: bit for
    bit the plain launches (each waits for its x before reading it)."""
    _skip_unless_available()
    n = k = 2048
    layers = [_operands(scheme, 1, n, k, seed=s)[0] for s in range(10)]
    x0 = torch.randn(1, k, device="cuda").bfloat16()

    def chain(x, pdl):
        for wq in layers:
            x = stream.BACKEND.run(x, wq, stream.BACKEND.packed_for(wq),
                                   config={"stages": 6, "pdl": pdl})
            if between:
                x = x * 0.5
        return x

    plain = chain(x0, False)
    chain(x0, True)  # warm-up (counters) before capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = chain(x0, True)
    graph.replay()
    torch.testing.assert_close(out, plain, rtol=0, atol=0)

