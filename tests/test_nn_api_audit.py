"""The nn API as a PyTorch user expects it (session 36's audit): a bias alone trains, a bad
scale in load_state_dict is named and the rest still loads, MergedFp8Linear.out_dtype works,
FP8 x takes the module's static scale, bad calibration / weights are refused by name, and
convert() of a model without nn.Linear says so."""

import pytest
import torch
from torch import nn

from fp8tower import Fp8Linear
from fp8tower.formats import FP8_DTYPE, quantize_weight
from fp8tower.nn.linear import fp8_linear
from fp8tower.nn.merged import merge_linears


def _lin(n=32, k=64, bias=True, seed=0):
    g = torch.Generator().manual_seed(seed)
    lin = nn.Linear(k, n, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(n, k, generator=g) * 0.05)
        if bias:
            lin.bias.copy_(torch.randn(n, generator=g))
    return lin


def test_a_bias_alone_gets_its_gradient_through_the_planned_path(interpret):
    """BitFit: x needs no gradient, the bias does. The launch plan (Triton here) has no
    autograd: the hot path sent only x.requires_grad to the gradient path."""
    m = Fp8Linear.from_linear(_lin(), "channel_token", backend="triton")
    m.bias.requires_grad_(True)
    x = torch.randn(2, 64).bfloat16()
    y = m(x)
    assert y.requires_grad
    y.float().sum().backward()
    torch.testing.assert_close(m.bias.grad, torch.full((32,), 2.0))
    with torch.no_grad():  # no gradient wanted: the plan serves it
        assert not m(x).requires_grad


def test_a_bad_scale_in_load_state_dict_names_the_module_and_the_rest_loads():
    model = nn.Sequential(Fp8Linear.from_linear(_lin(), "channel_token"),
                          Fp8Linear.from_linear(_lin(seed=1), "channel_token"),
                          nn.LayerNorm(32))
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    sd["0.weight_scale"][5] = 0.0
    sd["2.weight"].fill_(3.0)
    with pytest.raises(RuntimeError, match=r"(?s)Error\(s\) in loading.*key 0\.weight_scale: "
                                           r"channel_token weight scale .* got 0\.0"):
        model.load_state_dict(sd)
    assert bool((model[2].weight == 3.0).all())  # loaded after the bad module
    with pytest.raises(ValueError, match="got 0.0"):  # and the bad module refuses to run
        model[0](torch.randn(1, 64))


def test_a_wrong_dtype_in_load_state_dict_is_named_and_the_module_kept():
    m = Fp8Linear.from_linear(_lin(), "channel_token")
    before = m.weight.clone()
    sd = {k: v.clone() for k, v in m.state_dict().items()}
    sd["weight"] = sd["weight"].float().bfloat16()
    with pytest.raises(RuntimeError, match="weight has dtype torch.bfloat16"):
        m.load_state_dict(sd)
    assert torch.equal(m.weight.view(torch.uint8), before.view(torch.uint8))


def test_load_state_dict_with_assign_keeps_float32_scales():
    src = Fp8Linear.from_linear(_lin(), "per_tensor", act_scale=0.02)
    sd = {k: (v if k == "weight" else v.bfloat16()) for k, v in src.state_dict().items()}
    m = Fp8Linear(64, 32, "per_tensor", bias=True, static_input_scale=True)
    m.load_state_dict(sd, assign=True)
    m.float()
    assert m.weight_scale.dtype == m.input_scale.dtype == torch.float32


@pytest.mark.parametrize("assign", [False, True])
def test_load_state_dict_takes_a_checkpoints_scale_shapes(assign):
    """compressed-tensors stores channel scales (N, 1) and scalars (1,): the same values in
    the module's (N,) and () shapes (2026-12-05 audit: torch's bare "size mismatch");
    another shape of as many values is still refused."""
    src = Fp8Linear.from_linear(_lin(), "channel_token")
    sd = {k: v.clone() for k, v in src.state_dict().items()}
    sd["weight_scale"] = sd["weight_scale"].reshape(-1, 1) * 2
    m = Fp8Linear(64, 32, "channel_token", bias=True)
    m.load_state_dict(sd, assign=assign)
    assert m.weight_scale.shape == (32,)
    torch.testing.assert_close(m.weight_scale, src.weight_scale * 2)
    x = torch.randn(2, 64)
    torch.testing.assert_close(m(x) - m.bias, 2 * (src(x) - src.bias))
    per_tensor = Fp8Linear.from_linear(_lin(), "per_tensor", act_scale=0.02)
    sd = {k: v.reshape(1) if v.dim() == 0 else v for k, v in per_tensor.state_dict().items()}
    m = Fp8Linear(64, 32, "per_tensor", bias=True, static_input_scale=True)
    m.load_state_dict(sd, assign=assign)
    assert m.weight_scale.shape == m.input_scale.shape == ()
    sd = {k: v.clone() for k, v in src.state_dict().items()}
    sd["weight_scale"] = sd["weight_scale"].reshape(4, 8)
    with pytest.raises(RuntimeError, match="size mismatch for weight_scale"):
        Fp8Linear(64, 32, "channel_token", bias=True).load_state_dict(sd)


def test_merged_out_dtype_reaches_the_merged_linear():
    mm = merge_linears([Fp8Linear.from_linear(_lin(n), "channel_token", backend="reference")
                        for n in (16, 32)])
    assert mm.out_dtype is None
    mm.out_dtype = torch.float32
    assert [y.dtype for y in mm(torch.randn(2, 64).bfloat16())] == [torch.float32] * 2
    with pytest.raises(ValueError):
        mm.out_dtype = torch.int8


def test_fp8_x_takes_the_modules_static_input_scale():
    m = Fp8Linear.from_linear(_lin(), "per_tensor", act_scale=0.02, backend="reference")
    xq = (torch.randn(2, 64) / 0.02).clamp(-448, 448).to(FP8_DTYPE)
    want = fp8_linear(xq, m.fp8_weight(), bias=m.bias, act_scale=m.input_scale,
                      backend="reference")
    torch.testing.assert_close(m(xq), want, rtol=0, atol=0)
    dynamic = Fp8Linear.from_linear(_lin(), "per_tensor", backend="reference")
    with pytest.raises(ValueError, match="FP8 x needs the module's static input_scale"):
        dynamic(xq)


@pytest.mark.parametrize("calibration, match", [
    (torch.empty(0, 64), "non-empty floating tensor"),
    (torch.ones(2, 64, dtype=torch.int32), "non-empty floating tensor"),
    ([1.0, 2.0], "non-empty floating tensor.*got list"),
    (torch.tensor([[1.0, float("nan")]]), "calibration inputs must be finite"),
    (torch.tensor([[1.0, float("inf")]]), "calibration inputs must be finite"),
])
def test_bad_calibration_is_named(calibration, match):
    with pytest.raises(ValueError, match=match):
        Fp8Linear.from_linear(_lin(), "per_tensor", calibration=calibration)


def test_a_replaced_weight_must_keep_the_modules_shape_and_dtype():
    m = Fp8Linear.from_linear(_lin(bias=False), "per_tensor")
    with pytest.raises(ValueError, match=r"float8_e4m3fn of shape \(32, 64\).*\(16, 64\)"):
        m.weight = torch.zeros(16, 64, dtype=FP8_DTYPE)
    with pytest.raises(ValueError, match="torch.bfloat16"):
        m.weight = torch.zeros(32, 64, dtype=torch.bfloat16)
    m.weight = torch.zeros(32, 64, dtype=FP8_DTYPE)  # the right one is taken
    assert m(torch.randn(3, 64)).shape == (3, 32)


def test_a_weight_that_requires_grad_is_refused_as_scales_are():
    w = quantize_weight(torch.randn(32, 64), "per_tensor")
    w.data.requires_grad_(True)
    with pytest.raises(ValueError, match="weight.data requires grad"):
        fp8_linear(torch.randn(3, 64, requires_grad=True), w, backend="reference")


def test_convert_of_a_model_without_nn_linear_says_so():
    transformers = pytest.importorskip("transformers")
    import fp8tower
    from fp8tower.hf.conversion import ConvertError

    cfg = transformers.GPT2Config(n_embd=64, n_layer=1, n_head=4, vocab_size=64, n_positions=32)
    model = transformers.GPT2LMHeadModel(cfg)
    with pytest.raises(ConvertError, match="converted nothing: GPT2LMHeadModel has only the "
                                           "nn.Linear layers lm_head.*Conv1D"):
        fp8tower.convert(model, "per_tensor")
