"""The activation pre-pass (kernels/act_quant.py) on the CPU interpreter: block128's grouping
of 1x128 groups into programs changes the launch, never the bits."""

import pytest
import torch

from fp8tower.formats import Scheme

pytest.importorskip("triton")


@pytest.mark.parametrize("m,k", [(1, 640), (3, 1000), (2, 6144)])
def test_block128_groups_per_program_give_the_same_bits(interpret, m, k):
    from fp8tower.kernels import act_quant as aq

    g = torch.Generator().manual_seed(k)
    x = (torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-6, 6, (m, k), generator=g)))
    x = x.bfloat16()
    x[:, 128:256] = 0.0  # an all-zero group: the clamped scale
    runs = []
    for gpp in (1, 2, 8, 16):
        grid, args, kw, q, s = aq.quantize_args(x, Scheme.BLOCK128, groups_per_program=gpp)
        groups = -(-k // 128)
        per_program = min(gpp, 1 << (groups - 1).bit_length())  # at most the next power of 2
        assert grid == (m, -(-groups // per_program))
        aq._fp8_act_quant_kernel[grid](*args, **kw)
        runs.append((q.view(torch.uint8).clone(), s.clone()))
    for q, s in runs[1:]:
        assert torch.equal(q, runs[0][0]) and torch.equal(s, runs[0][1])


def test_per_tensor_pre_pass_takes_about_32_programs(monkeypatch):
    """act_quant.per_tensor_group: 2048 elements a program, doubled up to 8192 or one
    program a row while the grid holds more than PREPASS_PROGRAMS (32)."""
    from fp8tower.kernels import act_quant as aq

    monkeypatch.setattr(aq, "PER_TENSOR_GROUP", None)
    assert aq.PREPASS_PROGRAMS == 32
    cases = {(1, 5120): 2048, (8, 5120): 2048, (8, 6144): 2048, (16, 5120): 4096,
             (32, 5120): 8192, (32, 4096): 4096, (64, 5120): 8192, (64, 1024): 2048,
             (32, 17408): 8192, (1, 100000): 4096}
    assert {mk: aq.per_tensor_group(*mk) for mk in cases} == cases
    monkeypatch.setattr(aq, "PER_TENSOR_GROUP", 256)  # a benchmark's knob wins
    assert aq.per_tensor_group(32, 5120) == 256


@pytest.mark.parametrize("m,k", [(1, 5120), (3, 1000), (32, 5000)])
def test_per_tensor_elements_a_program_change_the_grid_never_the_bits(interpret, monkeypatch,
                                                                      m, k):
    """act_quant.PER_TENSOR_GROUP (benchmarks/bench_prepass_group.py's knob)."""
    from fp8tower.kernels import act_quant as aq

    x = (torch.randn(m, k, generator=torch.Generator().manual_seed(k)) * 30).bfloat16()
    scale = torch.tensor(0.05)
    runs = []
    for group in (None, 2048, 8192, 512, 256):
        monkeypatch.setattr(aq, "PER_TENSOR_GROUP", group)
        grid, args, kw, q, _ = aq.quantize_args(x, Scheme.PER_TENSOR, scale)
        group = group or aq.per_tensor_group(m, k)
        assert grid == (m, -(-k // group)) and kw["GROUP"] == group
        aq._fp8_act_quant_kernel[grid](*args, **kw)
        runs.append(q.view(torch.uint8).clone())
    assert all(torch.equal(r, runs[0]) for r in runs[1:])
    assert runs[0].any()


def test_block128_groups_per_program_rule():
    from fp8tower.kernels.act_quant import b128_groups_per_program, quantize_args

    with pytest.raises(ValueError, match="power of two, got 3"):
        quantize_args(torch.zeros(2, 512, dtype=torch.bfloat16), Scheme.BLOCK128,
                      groups_per_program=3)
    assert b128_groups_per_program(1) == 1 and b128_groups_per_program(8) == 8
    x = torch.zeros(32, 6144, dtype=torch.bfloat16)
    grid, _, kw, _, _ = quantize_args(x, Scheme.BLOCK128)
    assert grid == (32, 6) and kw["GPP"] == 8 and kw["num_warps"] == 8


# the interpreter's numpy warns on the inf group's inf - inf (NaN, as on the GPU)
@pytest.mark.filterwarnings("ignore:invalid value encountered in subtract:RuntimeWarning")
def test_weight_only_split_is_exact_and_keeps_infinities(interpret):
    """weight_only's pre-pass (act_quant._split8_groups): token m's rows 2m, 2m + 1 with
    scales up and up / 32 give x back exactly for every element >= 2^-14 of its group's max,
    over values spread across 40 binades; an all-zero group gets normal scales and zeros; a
    group holding an inf gets a NaN scale (an FP8 cast would saturate it)."""
    from fp8tower.kernels import act_quant as aq

    g = torch.Generator().manual_seed(0)
    m, k = 3, 1000
    x = torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-20, 20, (m, k), generator=g))
    x = x.bfloat16()
    x[1, 128:256] = 0.0
    x[2, 5] = float("inf")
    grid, args, kw, q, s = aq.quantize_args(x, Scheme.WEIGHT_ONLY)
    aq._fp8_act_quant_kernel[grid](*args, **kw)
    assert q.shape == (2 * m, k) and s.shape == (2 * m, -(-k // 128))
    xf, checked = x.float(), 0
    for t in range(m):
        for gi in range(s.shape[1]):
            cols = slice(gi * 128, min(k, gi * 128 + 128))
            a = xf[t, cols]
            amax = a.abs().max()
            if not torch.isfinite(amax):
                assert torch.isnan(s[2 * t, gi]) and torch.isnan(s[2 * t + 1, gi])
                continue
            assert s[2 * t, gi] == 32 * s[2 * t + 1, gi] and s[2 * t + 1, gi] >= 2.0**-126
            back = (q[2 * t, cols].float() * s[2 * t, gi]
                    + q[2 * t + 1, cols].float() * s[2 * t + 1, gi])
            big = a.abs() >= amax * 2.0**-14
            assert torch.equal(back[big], a[big]), (t, gi)
            checked += int(big.sum())
    assert checked > 500
    assert bool((q[2:4, 128:256].float() == 0).all())


@pytest.mark.filterwarnings("ignore:invalid value encountered in subtract:RuntimeWarning")
def test_weight_only_split_per_token_is_exact_down_to_2e14_of_the_row(interpret):
    """weight_only's pre-pass with one scale a token (act_quant._split8_groups over the row,
    wo_mode 3): rows 2m, 2m + 1 with scales up and up / 32 give x back exactly for every element >=
    2^-14 of its row's max and within 2^-22 of that max below it, over 40 binades; an
    all-zero row gets normal scales and zeros; a row holding an inf gets NaN scales."""
    from fp8tower.kernels import act_quant as aq

    g = torch.Generator().manual_seed(1)
    m, k = 4, 1000
    x = torch.randn(m, k, generator=g) * torch.exp2(torch.randint(-20, 20, (m, k), generator=g))
    x = x.bfloat16()
    x[1] = 0.0
    x[2, 5] = float("inf")
    grid, args, kw, q, s = aq.quantize_args(x, Scheme.WEIGHT_ONLY, per_token=True)
    assert grid == (m, 1) and kw["SPLIT8"] and kw["GROUP"] == k
    aq._fp8_act_quant_kernel[grid](*args, **kw)
    assert q.shape == (2 * m, k) and s.shape == (2 * m, 1)
    assert torch.isnan(s[4:6]).all()
    assert bool((q[2:4].float() == 0).all()) and bool((s[2:4] >= 2.0**-126).all())
    xf, exact, small = x.float(), 0, 0
    for t in (0, 3):
        a, amax = xf[t], xf[t].abs().max()
        assert s[2 * t, 0] == 32 * s[2 * t + 1, 0]
        back = q[2 * t].float() * s[2 * t, 0] + q[2 * t + 1].float() * s[2 * t + 1, 0]
        big = a.abs() >= amax * 2.0**-14
        assert torch.equal(back[big], a[big]), t
        assert bool(((back - a).abs() <= amax * 2.0**-22).all()), t
        exact, small = exact + int(big.sum()), small + int((~big & (back != a)).sum())
    assert exact > 500 and small > 0  # both regimes were reached


def test_per_token_split_is_weight_only_s():
    from fp8tower.kernels.act_quant import quantize_args

    with pytest.raises(ValueError, match="per_token splits weight_only's x; block128"):
        quantize_args(torch.zeros(2, 512, dtype=torch.bfloat16), Scheme.BLOCK128,
                      per_token=True)


@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128],
                         ids=str)
@pytest.mark.parametrize("m,k", [(1, 328), (5, 1000), (3, 5000)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_pre_pass_gives_the_references_bits_on_the_interpreter(interpret, scheme, m, k, dtype):
    """The pre-pass kernel (kernels/act_quant.py) against formats.quantize_activation, q and
    scales bit for bit, on grid-exact activations (the interpreter's own FP8 cast is not
    trusted on carries, DESIGN.md): K not a multiple of 128 (a partial last group), an
    all-zero token or 1x128 group (the MIN_SCALE floor). CPU backends send CPU tensors to
    the torch math, so nothing else compares the two here; on the GPU
    tests/test_gpu_plan.py does, on general values."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from fp8helpers import exact_activations

    from fp8tower.formats import quantize_activation
    from fp8tower.kernels import act_quant as aq

    x = exact_activations(m, k, scheme, 2.0**-4, seed=k, dtype=dtype)
    x[0, 1:128] = 0  # all but the marker of token 0's first group
    if scheme is Scheme.BLOCK128:
        x[0, :128] = 0  # an all-zero 1x128 group
    elif m > 1:
        x[-1] = 0  # an all-zero token
    static = torch.tensor(2.0**-4) if scheme is Scheme.PER_TENSOR else None
    q, s = aq.quantize(x, scheme, static)
    q_ref, s_ref = quantize_activation(x, scheme, static)
    assert torch.equal(s.reshape(s_ref.shape), s_ref)
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
    assert bool((q_ref.float() == 0).any())
    if scheme is not Scheme.PER_TENSOR:  # +-448 at each group's max: scale 2^-4
        assert bool(q_ref.float().abs().max() == 448) and bool((s_ref == 2.0**-4).any())
    if scheme is Scheme.BLOCK128 or (scheme is Scheme.CHANNEL_TOKEN and m > 1):
        assert bool((s_ref == 1e-12).any())  # the all-zero group's floor


@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128],
                         ids=str)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("scale", [0.05, 2.0**-4, 0.0137])
def test_exact_activations_are_grid_exact_in_their_dtype(scheme, dtype, scale):
    """tests/fp8helpers.exact_activations: x / scale (the reference's scale) is an FP8 grid
    value's exact quotient or rounds to it with no carry into the exponent: never just below
    a power of two, where the interpreter's cast goes wrong. The old helper (fp32 values,
    cast by the caller) put fp16 x / 0.05 just below them: 16-23 dB on the interpreter."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from fp8helpers import exact_activations

    from fp8tower.formats import FP8_DTYPE, quantize_activation

    x = exact_activations(7, 1000, scheme, scale, seed=3, dtype=dtype)
    assert x.dtype == dtype
    static = torch.tensor(scale) if scheme is Scheme.PER_TENSOR else None
    q, s = quantize_activation(x, scheme, static)
    if scheme is Scheme.BLOCK128:
        s = s.repeat_interleave(128, 1)[:, :1000]
    elif scheme is Scheme.CHANNEL_TOKEN:
        s = s[:, None]
    quotient = (x.float() / s).clamp(-448, 448)
    qf = q.float()
    assert torch.equal(quotient.to(FP8_DTYPE).float(), qf)
    pow2 = (qf != 0) & ((qf.view(torch.int32) & 0x7FFFFF) == 0)
    assert not bool((pow2 & (quotient.abs() < qf.abs())).any()), "a carry into the exponent"
    if dtype == torch.float32 or scale == 2.0**-4:  # 448 * scale held exactly: scale itself
        assert bool((s == torch.tensor(scale)).all())


@pytest.mark.parametrize("m,k", [(3, 640), (1, 640), (2, 384)])
def test_block128_pre_pass_writes_nothing_past_its_scales(interpret, m, k):
    """K a multiple of 128 and a group count that is not a multiple of the groups a program
    takes: a scale store masked `<=` K wrote one scale past each token's row (on a GPU a race
    with the next token's first group; past the last row, memory it does not own)."""
    from fp8tower.kernels import act_quant as aq

    ng = -(-k // 128)
    x = torch.randn(m, k, generator=torch.Generator().manual_seed(0)).bfloat16()
    for gpp in (1, 8):
        buf = torch.full(((m + 1) * ng,), float("nan"))
        s_out = buf[: m * ng].view(m, ng)
        grid, args, kw, _, _ = aq.quantize_args(x, Scheme.BLOCK128, s_out=s_out,
                                                groups_per_program=gpp)
        aq._fp8_act_quant_kernel[grid](*args, **kw)
        assert bool(buf[m * ng:].isnan().all()), gpp
        assert bool(torch.isfinite(s_out).all()), gpp


@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128],
                         ids=str)
@pytest.mark.parametrize("m,k", [(1, 640), (3, 1000), (9, 384)])
def test_pre_pass_writes_padded_m_major_buffers_in_place(interpret, scheme, m, k):
    """The layouts cuBLASLt takes, written by the pre-pass itself (backends/cublaslt.py: the
    padding and the M-major copy were 1-5 launches of their own): q the first m rows of a
    16-row buffer, block128's 1x128 scales M-major (strides (1, 16)), per_tensor's static
    scale once a row into an (M, 1) vector. Same bits as the default layouts; the padding
    rows are left as they were."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from fp8helpers import exact_activations

    from fp8tower.formats import FP8_DTYPE
    from fp8tower.kernels import act_quant as aq

    x = exact_activations(m, k, scheme, 2.0**-4, seed=k + m)
    static = torch.tensor(2.0**-4) if scheme is Scheme.PER_TENSOR else None
    q_ref, s_ref = aq.quantize(x, scheme, static)
    mp, ng = 16, -(-k // 128) if scheme is Scheme.BLOCK128 else 1
    q = torch.full((mp, k), 0x55, dtype=torch.uint8).view(FP8_DTYPE)
    s = torch.full((ng, mp), float("nan")).t()  # (mp, ng), strides (1, mp)
    got_q, got_s = aq.quantize(x, scheme, static, q=q[:m], s_out=s[:m])
    assert got_q.data_ptr() == q.data_ptr() and got_s.data_ptr() == s.data_ptr()
    assert torch.equal(q[:m].view(torch.uint8), q_ref.view(torch.uint8))
    assert bool((q[m:].view(torch.uint8) == 0x55).all())  # padding untouched
    want = s_ref.reshape(1, 1).expand(m, 1) if scheme is Scheme.PER_TENSOR else \
        s_ref.reshape(m, ng)
    assert torch.equal(s[:m], want)
    assert bool(s[m:].isnan().all())


def test_pre_pass_refuses_outputs_of_the_wrong_shape():
    from fp8tower.kernels.act_quant import quantize_args

    x = torch.zeros(2, 256, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match=r"s_out must be torch.float32 of shape \(2, 2\), got "
                       r"torch.float32 of shape \(2, 1\)"):
        quantize_args(x, Scheme.BLOCK128, s_out=torch.zeros(2, 1))
    with pytest.raises(ValueError, match=r"q must be torch.float8_e4m3fn of shape \(2, 256\)"):
        quantize_args(x, Scheme.CHANNEL_TOKEN, q=torch.zeros(3, 256, dtype=torch.float8_e4m3fn))
