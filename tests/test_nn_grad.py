"""Gradients through Fp8Linear / fp8_linear / merged views (ops.py's autograd formula):
w.r.t. x, straight through the activation quantization, dL/dx = dL/dy @ deq(W); w.r.t. a bias
that requires grad, dL/dy summed over the rows; none for the FP8 weight and its scales.
Every backend gets the same formula (the custom op's), eager and compiled; calls without a
gradient keep the cached plans (the inference hot path)."""

import pytest
import torch
from fp8helpers import random_weight
from torch import nn

from fp8tower.formats import Scheme, quantize_weight
from fp8tower.nn.linear import Fp8Linear, fp8_linear
from fp8tower.nn.merged import MergedFp8Linear

N, K = 96, 160


def _module(scheme, backend, bias=True):
    lin = nn.Linear(K, N, bias=bias)
    with torch.no_grad():
        lin.weight.copy_(random_weight(N, K, 3))
    act = 0.05 if scheme is Scheme.PER_TENSOR else None
    return Fp8Linear.from_linear(lin, scheme, act_scale=act, backend=backend)


def _by_hand(w, dtype):
    """The (N, K) weight w stands for, built here from w.data.float() and its scales expanded
    by hand (not Fp8Weight.dequantize, which the backward itself calls)."""
    n, k = w.shape
    s = w.scale.float()
    if w.scheme is Scheme.BLOCK128:
        s = s[torch.arange(n)[:, None] // 128, torch.arange(k)[None, :] // 128]
    else:
        s = s.reshape(-1, 1)  # a scalar, or one scale per output channel
    return (w.data.float() * s).to(dtype)


def _expected_grad(mod, g, dtype):
    return (g.to(dtype) @ _by_hand(mod.fp8_weight(), dtype)).to(dtype)


@pytest.mark.parametrize("scheme", list(Scheme), ids=str)
@pytest.mark.parametrize("backend", ["reference", "triton"])
def test_grad_wrt_x_is_grad_y_times_dequantized_w(interpret, scheme, backend):
    mod = _module(scheme, backend)
    x = torch.randn(3, K, requires_grad=True)
    y = mod(x)
    assert y.requires_grad and y.grad_fn is not None  # triton's used to be False, silently
    g = torch.randn(3, N)
    y.backward(g)
    torch.testing.assert_close(x.grad, _expected_grad(mod, g, torch.float32))
    # the forward value is an inference call's: the op plans as the module's eager path does
    # (its launch plans, session 43), so both run the same kernel (under the CPU interpreter
    # channel_token's and block128's eager one-launch twin quantizes x in the GEMM, whose
    # fp32 -> e4m3 cast the interpreter gets wrong on carries: not the pre-pass's values)
    with torch.no_grad():
        torch.testing.assert_close(y.detach(), mod(x.detach()), rtol=0, atol=0)


@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.BLOCK128], ids=str)
def test_triton_grads_equal_the_reference_backends(interpret, scheme):
    grads = {}
    for backend in ("reference", "triton"):
        mod = _module(scheme, backend)
        x = torch.linspace(-2, 2, 2 * K).reshape(2, 1, K).bfloat16().requires_grad_()
        g = torch.linspace(-1, 1, 2 * N).reshape(2, 1, N).bfloat16()
        mod(x).backward(g)
        assert x.grad.dtype == torch.bfloat16 and x.grad.shape == x.shape
        grads[backend] = x.grad
    torch.testing.assert_close(grads["triton"], grads["reference"], rtol=0, atol=0)


def test_plans_serve_calls_without_gradient_only():
    mod = _module(Scheme.CHANNEL_TOKEN, "reference")
    x = torch.randn(2, K)
    y0 = mod(x)
    (entry,) = mod._plans.values()
    y1 = mod(x.clone().requires_grad_())
    assert y1.requires_grad
    torch.testing.assert_close(y1.detach(), y0, rtol=0, atol=0)
    with torch.no_grad():
        y2 = mod(x.clone().requires_grad_())  # no gradient wanted: the plan
    assert not y2.requires_grad and next(iter(mod._plans.values())) is entry
    torch.testing.assert_close(y2, y0, rtol=0, atol=0)


def test_functional_bias_gets_its_gradient():
    w = quantize_weight(random_weight(N, K, 4), Scheme.CHANNEL_TOKEN)
    bias = torch.randn(N, requires_grad=True)
    x = torch.randn(4, K)  # only the bias wants a gradient
    y = fp8_linear(x, w, bias=bias, backend="reference")
    g = torch.randn(4, N)
    y.backward(g)
    torch.testing.assert_close(bias.grad, g.sum(0))
    x2 = x.clone().requires_grad_()
    fp8_linear(x2, w, bias=bias.detach(), backend="reference").backward(g)
    torch.testing.assert_close(x2.grad, g @ _by_hand(w, torch.float32))


def test_scales_that_require_grad_are_refused():
    weight = random_weight(N, K, 5).requires_grad_()
    w = quantize_weight(weight, Scheme.PER_TENSOR)  # its scale came from a weight with grad
    assert w.scale.requires_grad
    with pytest.raises(ValueError, match="weight.scale requires grad"):
        fp8_linear(torch.randn(2, K), w, backend="reference")
    with torch.no_grad():
        fp8_linear(torch.randn(2, K), w, backend="reference")


@pytest.mark.parametrize("scheme", list(Scheme))
@pytest.mark.parametrize("buffer", ["weight", "weight_scale", "input_scale"])
def test_a_module_scale_that_requires_grad_is_refused_on_the_planned_path(scheme, buffer):
    """Fp8Linear's planned call refuses it as fp8_linear does (2026-12-05 audit: the plan ran,
    and on the reference backend weight_scale got a gradient; a GPU kernel gives none)."""
    if buffer == "input_scale" and scheme is not Scheme.PER_TENSOR:
        pytest.skip("a static input scale is per_tensor's only")
    lin = nn.Linear(K, N)
    act = {"act_scale": 0.05} if buffer == "input_scale" else {}
    m = Fp8Linear.from_linear(lin, scheme, backend="reference", **act)
    m.use_plans = True  # whatever FP8TOWER_PLAN says
    x = torch.randn(2, K)
    m(x)  # the plan exists
    assert m._plans
    getattr(m, buffer).requires_grad_(True)
    with pytest.raises(ValueError, match=f"{buffer} requires grad"):
        m(x)
    with torch.no_grad():
        m(x)


def test_merged_views_pass_gradients():
    a, b = _module(Scheme.CHANNEL_TOKEN, "reference"), _module(Scheme.CHANNEL_TOKEN, "reference")
    with torch.no_grad():
        b.weight_scale.mul_(2)
    merged = MergedFp8Linear.from_linears([a, b], ["a", "b"])
    x = torch.randn(3, K, requires_grad=True)
    ya, yb = merged(x)
    ga, gb = torch.randn(3, N), torch.randn(3, N)
    ((ya * ga).sum() + (yb * gb).sum()).backward()
    want = _expected_grad(a, ga, torch.float32) + _expected_grad(b, gb, torch.float32)
    torch.testing.assert_close(x.grad, want)


def test_compiled_backward():
    torch._dynamo.reset()
    mod = _module(Scheme.CHANNEL_TOKEN, "reference")
    x = torch.randn(2, K, requires_grad=True)
    g = torch.randn(2, N)
    torch.compile(mod, backend="aot_eager")(x).backward(g)  # no formula: an error before
    torch.testing.assert_close(x.grad, _expected_grad(mod, g, torch.float32))
