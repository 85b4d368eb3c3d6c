import math

import pytest
import torch

from fp8tower.formats import (
    FP8_DTYPE,
    Fp8Weight,
    Scheme,
    amax_scale,
    dequantize,
    quantize_act_group128,
    quantize_act_per_tensor,
    quantize_act_per_token,
    quantize_weight,
    sqnr_db,
)


def test_scheme_parse():
    assert Scheme.parse("per-tensor") is Scheme.PER_TENSOR
    assert Scheme.parse(Scheme.BLOCK128) is Scheme.BLOCK128
    with pytest.raises(ValueError, match="unknown scheme 'int4'.*per_tensor"):
        Scheme.parse("int4")


@pytest.mark.parametrize("scheme", list(Scheme))
@pytest.mark.parametrize("shape", [(200, 328), (128, 256), (1, 5)])
def test_quantize_roundtrip(scheme, shape):
    w = torch.randn(*shape)
    q = quantize_weight(w, scheme)
    assert q.data.dtype == FP8_DTYPE and q.shape == shape
    # E4M3 has 3 mantissa bits: relative error per element <= 2^-4, SQNR ~ 30 dB.
    assert sqnr_db(w, dequantize(q)) > 25
    n, k = shape
    expected = {
        Scheme.PER_TENSOR: (),
        Scheme.CHANNEL_TOKEN: (n,),
        Scheme.WEIGHT_ONLY: (n,),
        Scheme.BLOCK128: (-(-n // 128), -(-k // 128)),
    }[scheme]
    assert tuple(q.scale.shape) == expected


def test_block128_partial_blocks_use_their_own_amax():
    w = torch.ones(130, 130)
    w[129, 129] = 100.0  # lives alone in the partial corner block
    q = quantize_weight(w, Scheme.BLOCK128)
    assert q.scale.shape == (2, 2)
    assert q.scale[1, 1] == pytest.approx(100.0 / 448)
    assert q.scale[0, 0] == pytest.approx(1.0 / 448)
    torch.testing.assert_close(dequantize(q), w, rtol=0.07, atol=0)


def test_non_finite_weight_names_where():
    w = torch.randn(8, 8)
    w[3, 5] = float("nan")
    w[6, 1] = float("inf")
    with pytest.raises(ValueError, match=r"2 non-finite.*index \(3, 5\)"):
        quantize_weight(w, "per_tensor")


def test_bad_weight_inputs():
    with pytest.raises(ValueError, match="2-D"):
        quantize_weight(torch.randn(4), "per_tensor")
    with pytest.raises(ValueError, match="bf16/fp16/fp32"):
        quantize_weight(torch.ones(4, 4, dtype=torch.int32), "per_tensor")
    with pytest.raises(ValueError, match="only applies to per_tensor"):
        quantize_weight(torch.randn(4, 4), "block128", act_scale=0.1)
    with pytest.raises(ValueError, match="finite number > 0"):
        quantize_weight(torch.randn(4, 4), "per_tensor", act_scale=-1.0)


def test_fp8weight_validates_scale_shape():
    data = torch.zeros(4, 8).to(FP8_DTYPE)
    with pytest.raises(ValueError, match=r"must have shape \(4,\)"):
        Fp8Weight(data, torch.ones(3), Scheme.CHANNEL_TOKEN)
    with pytest.raises(ValueError, match="2-D"):
        Fp8Weight(torch.zeros(4, 8), torch.ones(4), Scheme.CHANNEL_TOKEN)


BAD_SCALES = [0.0, -1.0, float("nan"), float("inf"), -float("inf")]


@pytest.mark.parametrize("bad", BAD_SCALES)
@pytest.mark.parametrize("scheme", list(Scheme))
def test_fp8weight_refuses_bad_weight_scale_values(scheme, bad):
    """Issue 9: scales are checked once when a weight is built (finite, > 0)."""
    w = quantize_weight(torch.randn(130, 260), scheme)
    scale = w.scale.clone()
    scale.view(-1)[-1] = bad
    with pytest.raises(ValueError, match=rf"{scheme} weight scale .* must be finite and > 0"):
        Fp8Weight(w.data, scale, scheme)


def test_static_act_scale_above_the_kernels_bound_is_refused():
    """Above ACT_SCALE_MAX the kernels' +-1024 s clamp overflows (fp8_gemm._div_by_scale) and
    an inf in x would quantize to NaN: refused where the scale comes in, naming the bound."""
    from fp8tower import fp8_linear
    from fp8tower.formats import ACT_SCALE_MAX

    w = quantize_weight(torch.randn(8, 16), "per_tensor")
    with pytest.raises(ValueError,
                       match=r"act_scale \(static activation scale\) must be at most 1e\+35"):
        Fp8Weight(w.data, w.scale, w.scheme, torch.tensor(ACT_SCALE_MAX * 4))
    with pytest.raises(ValueError, match="at most 1e\\+35, got 4"):
        quantize_weight(torch.randn(8, 16), "per_tensor", act_scale=4e35)
    with pytest.raises(ValueError, match="got 1e\\+39"):  # as given, not fp32's inf
        quantize_weight(torch.randn(8, 16), "per_tensor", act_scale=1e39)
    with pytest.raises(ValueError, match="at most 1e\\+35"):
        fp8_linear(torch.randn(2, 16), w, act_scale=4e35, backend="reference")
    Fp8Weight(w.data, w.scale, w.scheme, torch.tensor(ACT_SCALE_MAX / 10))  # inside: accepted


def test_static_act_scale_below_fp32_normal_is_refused():
    """A subnormal static scale makes the kernels' reciprocal 1 / s overflow: the pre-pass
    gave NaN for every x (zeros too) and the in-GEMM quant 448 where x / s is 100 (s = 1e-39).
    Refused where the scale comes in, naming the value and the bound; fp32's smallest normal
    is accepted."""
    from fp8tower.formats import ACT_SCALE_MIN

    assert ACT_SCALE_MIN == 2.0**-126
    w = quantize_weight(torch.randn(8, 16), "per_tensor")
    with pytest.raises(ValueError, match=r"act_scale \(static activation scale\) must be at "
                                         r"least 1.17549e-38 .*got 1e-39"):
        Fp8Weight(w.data, w.scale, w.scheme, torch.tensor(1e-39))
    with pytest.raises(ValueError, match=r"act_scale must be at least 1.17549e-38 .*got 1e-39"):
        quantize_weight(torch.randn(8, 16), "per_tensor", act_scale=1e-39)
    Fp8Weight(w.data, w.scale, w.scheme, torch.tensor(ACT_SCALE_MIN))  # the bound: accepted
    quantize_weight(torch.randn(8, 16), "per_tensor", act_scale=ACT_SCALE_MIN)


def test_pre_pass_at_the_smallest_static_scale_is_the_exact_division(interpret):
    """At ACT_SCALE_MIN (r = 2^126, finite) the pre-pass kernel's x / s is torch's, bit for
    bit: grid values times the scale (fp32 subnormals among them), zeros, and x far past
    448 s (saturated)."""
    from fp8tower.formats import ACT_SCALE_MIN, FP8_DTYPE, quantize_activation
    from fp8tower.kernels import act_quant as aq

    grid = torch.arange(0, 127, dtype=torch.uint8).view(FP8_DTYPE).float()
    # -0 left out: the kernel's FMA correction gives +0 for it (torch: -0); the same FP8 zero
    x = torch.cat([grid, -grid[1:]]) * ACT_SCALE_MIN  # fp32 subnormals below |g| = 1
    x = torch.cat([x, torch.tensor([5.0, -1e30])]).reshape(1, -1)
    s = torch.tensor(ACT_SCALE_MIN)
    q, _ = aq.quantize(x, Scheme.PER_TENSOR, s)
    q_ref, _ = quantize_activation(x, Scheme.PER_TENSOR, s)
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8))
    assert bool((q_ref.float().abs() == 448).sum() >= 4)


@pytest.mark.parametrize("bad", BAD_SCALES)
def test_fp8weight_refuses_bad_static_act_scale(bad):
    """Issue 9: a static act_scale of 0 (all outputs 0), negative (every sign flips) or NaN."""
    w = quantize_weight(torch.randn(8, 16), "per_tensor")
    with pytest.raises(ValueError, match=r"act_scale .* must be finite and > 0"):
        Fp8Weight(w.data, w.scale, w.scheme, torch.tensor(bad))
    with pytest.raises(ValueError, match="act_scale must be a finite number > 0"):
        quantize_weight(torch.randn(8, 16), "per_tensor", act_scale=bad)


def test_fp8weight_scale_must_be_floating_point():
    w = quantize_weight(torch.randn(8, 16), "channel_token")
    with pytest.raises(ValueError, match="floating-point tensor"):
        Fp8Weight(w.data, torch.ones(8, dtype=torch.int32), w.scheme)


def _fp8weight_refusal(case):
    w = quantize_weight(torch.randn(8, 16), "per_tensor")
    data, scale = w.data, w.scale
    kw = {
        "scale shape": (data, torch.ones(3), "channel_token", None),
        "scale value": (data, torch.zeros(8), "channel_token", None),
        "scale dtype": (data, torch.ones(8, dtype=torch.int32), "channel_token", None),
        "act shape": (data, scale, "per_tensor", torch.ones(2)),
        "act scheme": (data, torch.ones(8), "channel_token", torch.tensor(0.5)),
        "act value": (data, scale, "per_tensor", torch.tensor(-1.0)),
        "act max": (data, scale, "per_tensor", torch.tensor(1e36)),
        "act min": (data, scale, "per_tensor", torch.tensor(1e-40)),
        "data": (data.float(), scale, "per_tensor", None),
    }[case]
    with pytest.raises(ValueError) as info:
        Fp8Weight(*kw)
    return info.value


@pytest.mark.parametrize("case,field", [
    ("scale shape", "scale"), ("scale value", "scale"), ("scale dtype", "scale"),
    ("act shape", "act_scale"), ("act scheme", "act_scale"), ("act value", "act_scale"),
    ("act max", "act_scale"), ("act min", "act_scale"),
])
def test_fp8weight_scale_refusals_name_their_field(case, field):
    """A ScaleError (a ValueError) names the field, so a loader names its tensor by it."""
    import pickle

    from fp8tower.formats import ScaleError

    e = _fp8weight_refusal(case)
    assert isinstance(e, ScaleError) and e.field == field
    again = pickle.loads(pickle.dumps(e))
    assert (type(again), str(again), again.field) == (ScaleError, str(e), field)


def test_fp8weight_data_refusal_is_no_scale_error():
    from fp8tower.formats import ScaleError

    assert not isinstance(_fp8weight_refusal("data"), ScaleError)


def test_scale_values_checked_at_build_not_per_call(monkeypatch):
    """The check runs at construction; moving a weight or a call does not repeat it."""
    from fp8tower import formats

    w = quantize_weight(torch.randn(8, 16), "per_tensor", act_scale=0.5)
    calls = []
    monkeypatch.setattr(formats, "check_scale_values", lambda t, what: calls.append(what))
    w.to("cpu")
    Fp8Weight(w.data, w.scale, w.scheme, w.act_scale, check_values=False)
    assert calls == []
    Fp8Weight(w.data, w.scale, w.scheme, w.act_scale)
    assert len(calls) == 2  # weight scale and act_scale


def test_activation_quantizers():
    x = torch.randn(5, 300)
    q, s = quantize_act_per_token(x)
    assert s.shape == (5,) and torch.allclose(s, x.abs().amax(1) / 448)
    q, s = quantize_act_group128(x)
    assert q.shape == (5, 300) and s.shape == (5, 3)
    assert s[:, 2] == pytest.approx(x[:, 256:].abs().amax(1) / 448)
    q, s = quantize_act_per_tensor(x * 100, 0.01)
    assert float(q.float().abs().max()) == 448.0  # saturates instead of overflowing
    assert float(s) == pytest.approx(0.01)


def test_sqnr_nan_is_minus_inf():
    a = torch.randn(10)
    b = a.clone()
    b[3] = float("nan")
    assert sqnr_db(a, b) == float("-inf")
    assert sqnr_db(a, a) == float("inf")


@pytest.mark.parametrize(("ref", "out", "db"), [
    ([1.0] * 100, [1.01] * 100, 40.0),  # |ref| 10, |err| 0.1
    ([1.0] * 100, [1.1] * 100, 20.0),
    ([3.0, 4.0], [3.0, 4.005], 60.0),  # |ref| 5, |err| 0.005
    ([3.0, 4.0], [0.0, 0.0], 0.0),
    ([3.0, 4.0], [-3.0, -4.0], -20 * math.log10(2)),
    ([[1.0, 0.0]], [[1.0], [1e-3]], 60.0),  # the same count of elements, another shape
], ids=["40dB", "20dB", "60dB", "zeros", "negated", "reshaped"])
def test_sqnr_db_is_the_norm_ratio_in_decibels(ref, out, db):
    """sqnr_db = 20 log10(|ref| / |ref - out|) over all elements, on known errors."""
    ref, out = torch.tensor(ref, dtype=torch.float64), torch.tensor(out, dtype=torch.float64)
    assert sqnr_db(ref, out) == pytest.approx(db, abs=1e-9)


def test_import_is_light():
    """`import fp8tower` imports no optional package and touches no CUDA; nor does the tower
    (its Triton stand-in arm, tower/standin.py, is imported when that arm runs)."""
    import subprocess
    import sys

    code = ("import sys, fp8tower; from fp8tower import Fp8Linear, fp8_linear; "
            "import fp8tower.cli; import fp8tower.tower.build; "
            "bad = [m for m in ('triton', 'matplotlib', 'jinja2') if m in sys.modules]; "
            "import torch; assert not torch.cuda.is_initialized(); print(bad)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


@pytest.mark.parametrize("scheme", list(Scheme))
@pytest.mark.parametrize(("n", "k"), [(200, 300), (256, 128)])
def test_scale_table_matches_quantized_weights(scheme, n, k):
    """formats' one table of scale shapes and bytes agrees with what quantize_weight makes,
    with Fp8Weight.nbytes and with GemmProblem.bytes_moved."""
    from fp8tower.formats import weight_scale_bytes, weight_scale_shape
    from fp8tower.problem import GemmProblem

    w = quantize_weight(torch.randn(n, k) * 0.02, scheme)
    assert tuple(w.scale.shape) == weight_scale_shape(scheme, n, k)
    assert w.nbytes() == n * k + weight_scale_bytes(scheme, n, k)
    p = GemmProblem(m=3, n=n, k=k, scheme=scheme)
    act = 1 if p.act_dtype == torch.float8_e4m3fn else 2
    assert p.bytes_moved() == w.nbytes() + 3 * k * act + 3 * n * 2
    channel = weight_scale_bytes(scheme, n, k, channel=True)
    assert channel == (4 * n if scheme is not Scheme.BLOCK128 else weight_scale_bytes(scheme, n, k))


def test_module_build_and_load_check_scale_values():
    """Fp8Linear: a bad scale in a state_dict is refused at load, before any call (as torch
    reports a size mismatch: after the whole load, every error listed)."""
    from fp8tower import Fp8Linear

    lin = Fp8Linear.from_linear(torch.nn.Linear(16, 8), "per_tensor", act_scale=0.25)
    sd = lin.state_dict()
    for key, bad in (("weight_scale", 0.0), ("input_scale", -1.0), ("input_scale", float("nan"))):
        broken = {k: v.clone() for k, v in sd.items()}
        broken[key].fill_(bad)
        with pytest.raises(RuntimeError, match="must be finite and > 0"):
            lin.load_state_dict(broken)


@pytest.mark.parametrize("bad", BAD_SCALES)
def test_fp8_linear_refuses_a_bad_number_act_scale(bad):
    """Issue 9: fp8_linear(act_scale=0 / negative / NaN / inf) gave zeros, flipped signs, NaN."""
    from fp8tower import fp8_linear

    w = quantize_weight(torch.randn(8, 16), "per_tensor")
    with pytest.raises(ValueError, match="act_scale must be a finite number > 0"):
        fp8_linear(torch.randn(2, 16), w, act_scale=bad, backend="reference")


@pytest.mark.parametrize("tiny", [1e-39, 1e-46])
def test_fp8_linear_refuses_a_number_act_scale_below_fp32_normal(tiny):
    """1e-39 is subnormal in float32 (Triton's in-GEMM quantization gave -14.6 dB against the
    reference) and 1e-46 is 0.0 (zeros against NaN rows): refused as formats refuses them."""
    from fp8tower import fp8_linear

    w = quantize_weight(torch.randn(8, 16), "per_tensor")
    with pytest.raises(ValueError, match="act_scale must be at least .*smallest normal"):
        fp8_linear(torch.randn(2, 16), w, act_scale=tiny, backend="reference")


def test_amax_scale_is_the_ieee_quotient():
    """amax / 448 rounded once (float64 then float32 is exact here: amax / 7 never lands on
    a float32 midpoint), floored at MIN_SCALE; one cached divisor per device."""
    from fp8tower.formats import FP8_MAX, MIN_SCALE, _fp8_max_on, amax_scale

    amax = torch.rand(10_000, dtype=torch.float32) * torch.exp2(torch.randint(-20, 20, (10_000,)))
    want = (amax.double() / FP8_MAX).float().clamp_min(MIN_SCALE)
    assert torch.equal(amax_scale(amax), want)
    assert amax_scale(torch.tensor(0.0)).item() == pytest.approx(MIN_SCALE)
    assert _fp8_max_on(torch.device("cpu")) is _fp8_max_on(torch.device("cpu"))


@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.BLOCK128])
def test_kernel_scale(scheme):
    """What the Triton and stream kernels read: block scales for block128 (as stored, float32,
    contiguous), else the (N,) per-channel vector (a per-tensor scale expanded)."""
    w = quantize_weight(torch.randn(200, 272) * 0.02, scheme,
                        act_scale=0.05 if scheme is Scheme.PER_TENSOR else None)
    ks = w.kernel_scale()
    assert ks.dtype == torch.float32 and ks.is_contiguous()
    if scheme is Scheme.BLOCK128:
        assert ks.shape == (2, 3) and torch.equal(ks, w.scale.float())
    else:
        assert ks.shape == (200,) and torch.equal(ks, w.channel_scale())
        assert torch.equal(ks, w.scale.float().reshape(-1).expand(200))


@pytest.mark.parametrize(("r", "c"), [(0, 0), (127, 0), (0, 127), (127, 127), (255, 200),
                                      (259, 259)])
def test_block128_scale_is_the_amax_of_every_element_of_its_block(r, c):
    """Random weights hide an amax that skips part of a block (the last row of each 128-row
    block skipped: a spike there quantized at 4 dB, every test passed)."""
    w = torch.full((260, 260), 0.01)
    w[r, c] = -1.0
    q = quantize_weight(w, "block128")
    want = torch.full((3, 3), 0.01 / 448)
    want[r // 128, c // 128] = 1.0 / 448
    torch.testing.assert_close(q.scale, want, rtol=0, atol=0)
    assert float(q.dequantize()[r, c]) == -1.0


def test_per_token_scale_is_the_abs_max():
    """A token whose amax is negative (an amax without abs passed the unseeded random test
    about 3% of the time)."""
    x = torch.randn(5, 300, generator=torch.Generator().manual_seed(0))
    x[0, 7] = -10.0
    q, s = quantize_act_per_token(x)
    assert torch.equal(s, amax_scale(x.abs().amax(1)))
    assert float(q[0, 7].float() * s[0]) == -10.0


def test_replace_and_reassignment_drop_the_prepared_forms():
    """dataclasses.replace and a reassigned field give a weight whose prepared forms are
    made from its own tensors (2026-12-05 audit: both kept the old ones, and the Triton
    backend computed with the old scale, 0.5x the reference for a doubled one)."""
    import dataclasses

    from fp8tower import fp8_linear

    w = quantize_weight(torch.randn(16, 160), "channel_token")
    x = torch.randn(2, 160)
    y = fp8_linear(x, w, backend="reference")
    w.packed["sentinel"] = object()  # what a backend's prepare leaves
    w2 = dataclasses.replace(w, scale=w.scale * 2)
    assert w2.packed == {} and "sentinel" in w.packed
    torch.testing.assert_close(fp8_linear(x, w2, backend="reference"), 2 * y)
    w.scale = w.scale * 2
    assert w.packed == {}
    torch.testing.assert_close(fp8_linear(x, w, backend="reference"), 2 * y)
    # checked as construction checks: a refused value leaves the weight as it was
    good = w.scale
    with pytest.raises(ValueError, match="finite and > 0"):
        w.scale = torch.full((16,), float("nan"))
    assert w.scale is good
    with pytest.raises(ValueError, match="must have shape"):
        w.data = w.data[:8]
    assert w.shape == (16, 160)
    # a refusal of another kind leaves the weight as it was, its checks on
    with pytest.raises(TypeError, match="act_scale must be a torch.Tensor or None, got float"):
        w.act_scale = 0.02
    assert w.act_scale is None
    with pytest.raises(ValueError, match="finite and > 0"):
        w.scale = torch.full((16,), -1.0)
    # the compiled op's registry (keyed by the tensors' addresses) forgets the old ones
    from fp8tower.nn import ops

    ops.register(w)
    w.packed["sentinel"] = object()
    with pytest.raises(ValueError):  # refused: still registered, its prepared forms kept
        w.scale = torch.full((16,), float("inf"))
    assert "sentinel" in w.packed and ops.weight_for(w.data, w.scale, None, w.scheme) is w
    before = w.scale
    w.scale = w.scale * 0.5
    assert ops.weight_for(w.data, before, None, w.scheme) is not w
    assert ops.register(w) is w and ops.weight_for(w.data, w.scale, None, w.scheme) is w


def test_fp8weight_refuses_an_empty_weight():
    with pytest.raises(ValueError, match=r"N and K > 0, got shape \(0, 16\)"):
        Fp8Weight(torch.zeros(0, 16, dtype=FP8_DTYPE), torch.ones(0), "channel_token")


@pytest.mark.parametrize("value", [-1.0, 0.0, float("nan"), 1e-45])
def test_fp8_linear_checks_a_cpu_tensor_act_scale(value):
    """A CPU tensor act_scale is read without a GPU sync: checked as a number is (2026-12-05
    audit: -1 gave Triton -14336 against the reference's 32, 0 gave zeros)."""
    from fp8tower import fp8_linear

    w = quantize_weight(torch.ones(8, 32), "per_tensor")
    with pytest.raises(ValueError, match="act_scale must"):
        fp8_linear(torch.ones(2, 32), w, act_scale=torch.tensor(value))


def test_fp8_linear_checks_scales_edited_in_place():
    """An in-place edit is seen by its version counter: the new values are checked once, and
    refused on every call until they are fixed."""
    from fp8tower import fp8_linear

    x = torch.ones(2, 32)
    w = quantize_weight(torch.ones(8, 32), "per_tensor", act_scale=0.01)
    y = fp8_linear(x, w)
    w.act_scale.fill_(-0.01)
    for _ in range(2):
        with pytest.raises(ValueError, match="act_scale .*finite and > 0"):
            fp8_linear(x, w)
    w.act_scale.fill_(0.01)
    torch.testing.assert_close(fp8_linear(x, w), y)
    w.scale.mul_(-1)
    with pytest.raises(ValueError, match="weight scale .*finite and > 0"):
        fp8_linear(x, w)
