"""Session 34's audit of fp8tower.nn: the functional call sees in-place edits, a state_dict
shard without the scales loads after to_empty, zero tokens keep the autograd graph, and
from_weight / from_linear / act_scale refuse what they cannot take, by name."""

from __future__ import annotations

import pytest
import torch
from fp8helpers import exact_activations

from fp8tower.formats import Fp8Weight, Scheme, quantize_weight
from fp8tower.nn.linear import Fp8Linear, fp8_linear


def test_the_functional_call_sees_an_in_place_scale_edit(interpret):
    w = quantize_weight(torch.randn(128, 256), "per_tensor", act_scale=0.05)
    x = exact_activations(2, 256, Scheme.PER_TENSOR, 0.05)
    y1 = fp8_linear(x, w, backend="triton").float()
    with torch.no_grad():
        w.scale.mul_(2)
    y2 = fp8_linear(x, w, backend="triton").float()  # Triton's scale vector was a stale copy
    assert torch.allclose(y2, 2 * y1, rtol=1e-2, atol=1e-3)


def test_a_state_dict_shard_without_the_scales_loads_after_to_empty():
    src = Fp8Linear.from_linear(torch.nn.Linear(64, 32), "channel_token")
    sd = src.state_dict()
    m = Fp8Linear(64, 32, "channel_token", bias=True, device="meta").to_empty(device="cpu")
    with torch.no_grad():
        m.weight_scale.fill_(0)  # what uninitialized memory may hold
    m.load_state_dict({"weight": sd["weight"], "bias": sd["bias"]}, strict=False)
    m.load_state_dict({"weight_scale": sd["weight_scale"]}, strict=False)
    x = torch.randn(3, 64)
    assert torch.equal(m(x), src(x))
    # a scale that stays bad is still refused, at the forward
    m2 = Fp8Linear(64, 32, "channel_token", bias=True, device="meta").to_empty(device="cpu")
    with torch.no_grad():
        m2.weight_scale.fill_(0)
    m2.load_state_dict({"weight": sd["weight"], "bias": sd["bias"]}, strict=False)
    with pytest.raises(ValueError, match="weight scale .* must be finite and > 0"):
        m2(x)


def test_zero_tokens_keep_the_graph():
    m = Fp8Linear.from_linear(torch.nn.Linear(64, 32), "per_tensor")
    x = torch.randn(0, 64, requires_grad=True)
    y = m(x)
    assert y.shape == (0, 32) and y.requires_grad
    y.sum().backward()
    assert x.grad is not None and x.grad.shape == (0, 64)


def test_a_one_element_act_scale_of_shape_1_builds_a_module():
    w = quantize_weight(torch.randn(32, 64), "per_tensor")
    w1 = Fp8Weight(w.data, w.scale, "per_tensor", torch.tensor([0.05]))
    assert w1.act_scale.shape == ()
    m = Fp8Linear.from_weight(w1)
    assert float(m.input_scale) == pytest.approx(0.05)


def test_from_linear_and_from_weight_refuse_what_they_cannot_take():
    lin = torch.nn.Linear(64, 32)
    with pytest.raises(ValueError, match="from_linear takes device .* .to\\(device\\)"):
        Fp8Linear.from_linear(lin, "per_tensor", device="cpu")
    with pytest.raises(ValueError, match="from_weight takes device"):
        Fp8Linear.from_weight(quantize_weight(lin.weight.detach(), "per_tensor"), device="cpu")
    with pytest.raises(ValueError, match="on the meta device: build Fp8Linear"):
        Fp8Linear.from_linear(torch.nn.Linear(64, 32, device="meta"), "per_tensor")
    with pytest.raises(TypeError, match="act_scale must be a number or a one-element tensor, "
                                        "got str '0.1'"):
        Fp8Linear.from_linear(lin, "per_tensor", act_scale="0.1")
