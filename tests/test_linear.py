import pytest
import torch

from fp8tower import Fp8Linear, fp8_linear, quantize_weight
from fp8tower.backends import BackendError
from fp8tower.backends.reference import fp8_linear_ref
from fp8tower.formats import FP8_DTYPE, Scheme, sqnr_db


@pytest.mark.parametrize("scheme", list(Scheme))
def test_from_linear_close_to_bf16(scheme):
    torch.manual_seed(0)
    lin = torch.nn.Linear(328, 200, bias=True)
    x = torch.randn(3, 5, 328)
    mod = Fp8Linear.from_linear(lin, scheme, calibration=x if scheme is Scheme.PER_TENSOR else None)
    y = mod(x)
    assert y.shape == (3, 5, 200)
    assert sqnr_db(lin(x).detach(), y) > 22  # the scheme's quantization error, both operands


def test_state_dict_round_trip():
    torch.manual_seed(1)
    lin = torch.nn.Linear(256, 96)
    a = Fp8Linear.from_linear(lin, "per_tensor", act_scale=0.01)
    b = Fp8Linear(256, 96, "per_tensor", bias=True, static_input_scale=True)
    b.load_state_dict(a.state_dict())
    x = torch.randn(4, 256)
    assert torch.equal(a(x), b(x))
    assert set(a.state_dict()) == {"weight", "weight_scale", "input_scale", "bias"}
    assert a.state_dict()["weight"].dtype == FP8_DTYPE


def test_module_matches_reference_backend_output():
    lin = torch.nn.Linear(130, 70, bias=False)
    mod = Fp8Linear.from_linear(lin, "block128")
    x = torch.randn(2, 130)
    ref = fp8_linear_ref(x, mod.fp8_weight(), out_dtype=torch.float32)
    assert torch.equal(mod(x), ref)


def test_errors_name_the_problem():
    w = quantize_weight(torch.randn(64, 128), "channel_token")
    with pytest.raises(ValueError, match="last dimension must be K=128"):
        fp8_linear(torch.randn(2, 100), w)
    with pytest.raises(ValueError, match="dtype torch.int64"):
        fp8_linear(torch.ones(2, 128, dtype=torch.long), w)
    with pytest.raises(ValueError, match="is on meta but the weight is on cpu"):
        fp8_linear(torch.randn(2, 128, device="meta"), w)
    with pytest.raises(ValueError, match="FP8 activations are accepted by the per_tensor"):
        fp8_linear(torch.randn(2, 128).to(FP8_DTYPE), w)
    with pytest.raises(BackendError, match="unknown backend 'nonesuch'"):
        fp8_linear(torch.randn(2, 128), w, backend="nonesuch")
    with pytest.raises(BackendError, match="cublaslt.*cannot serve"):
        fp8_linear(torch.randn(2, 128), w, backend="cublaslt")
    with pytest.raises(ValueError, match="static input scale applies to per_tensor"):
        Fp8Linear(128, 64, "block128", static_input_scale=True)


def test_an_unknown_backend_is_refused_when_set():
    """Fp8Linear(backend="foo") was built, and only its first forward raised."""
    lin = torch.nn.Linear(128, 64)
    with pytest.raises(BackendError, match="unknown backend 'foo': expected auto or one of "
                       ".*reference"):
        Fp8Linear.from_linear(lin, "per_tensor", backend="foo")
    mod = Fp8Linear.from_linear(lin, "per_tensor", backend="reference")
    with pytest.raises(BackendError, match="unknown backend 'bar'"):
        mod.backend = "bar"
    assert mod.backend == "reference"
    mod.backend = "auto"
    assert mod(torch.randn(2, 128)).shape == (2, 64)


def test_fp8_input_and_empty_batch():
    w = quantize_weight(torch.randn(32, 64), "per_tensor")
    xq = torch.randn(3, 64).to(FP8_DTYPE)
    y = fp8_linear(xq, w, act_scale=0.5)
    assert y.dtype == torch.bfloat16 and y.shape == (3, 32)
    assert fp8_linear(torch.randn(0, 64), w).shape == (0, 32)


@pytest.mark.parametrize("cast", ["bf16", "half"])
def test_module_dtype_casts_keep_fp8_weights_and_fp32_scales(cast):
    lin = torch.nn.Linear(256, 64, bias=True)
    mod = Fp8Linear.from_linear(lin, "per_tensor", act_scale=0.05, backend="reference")
    w8, scale = mod.weight.clone(), mod.weight_scale.clone()
    {"bf16": lambda: mod.to(torch.bfloat16), "half": mod.half}[cast]()
    assert mod.weight.dtype == torch.float8_e4m3fn and mod.weight_scale.dtype == torch.float32
    assert torch.equal(mod.weight.view(torch.uint8), w8.view(torch.uint8))
    assert torch.equal(mod.weight_scale, scale) and mod.input_scale.dtype == torch.float32
    assert mod.bias.dtype != torch.float32  # the bias follows the cast
    y = mod(torch.randn(2, 256, dtype=mod.bias.dtype))
    assert torch.isfinite(y).all()


def test_repr_says_how_per_tensor_scales_x():
    """A dynamic per_tensor scale couples a call's rows (one amax over all of them): the
    module's repr says which it has (2026-12-05 lifecycle audit)."""
    lin = torch.nn.Linear(64, 32)
    assert "input_scale=static" in repr(Fp8Linear.from_linear(lin, "per_tensor", act_scale=0.1))
    assert "input_scale=dynamic" in repr(Fp8Linear.from_linear(lin, "per_tensor"))
    assert "input_scale" not in repr(Fp8Linear.from_linear(lin, "channel_token"))
    assert "out_dtype=torch.float32" in repr(
        Fp8Linear.from_linear(lin, "channel_token", out_dtype=torch.float32))
