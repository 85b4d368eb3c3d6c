"""Fp8Linear / fp8_linear in the contexts around a call: torch.autocast, x on a CUDA device
other than the current one, CUDA graph capture (plans' buffers, act_scale numbers),
same_kernels_as_graphs nesting, meta -> to_empty -> load_state_dict. CPU: CUDA is simulated
with mocks (a CPU tensor that says it is on CUDA, a fake current device and capture flag);
tests/test_gpu_plan.py runs the real thing."""

import contextlib
import gc
import weakref

import pytest
import torch
from fp8helpers import random_weight
from torch import nn

from fp8tower import backends, dispatch
from fp8tower.formats import Scheme, quantize_weight
from fp8tower.nn import linear as L
from fp8tower.nn import ops
from fp8tower.nn import plan as P
from fp8tower.nn.linear import Fp8Linear, fp8_linear
from fp8tower.nn.merged import MergedFp8Linear

N, K = 80, 384


def _module(scheme=Scheme.CHANNEL_TOKEN, backend="reference", **kw):
    lin = nn.Linear(K, N, bias=True)
    with torch.no_grad():
        lin.weight.copy_(random_weight(N, K, 2))
    return Fp8Linear.from_linear(lin, scheme, backend=backend, **kw)


# ----------------------------------------------------------------------------- autocast


def test_autocast_dtype_is_followed_like_nn_linear():
    lin = nn.Linear(K, N)
    mod = Fp8Linear.from_linear(lin, "channel_token", backend="reference")
    x = torch.randn(3, K)
    want = mod(x.bfloat16())
    merged = MergedFp8Linear.from_linears([mod, mod], ["a", "b"])
    for plans in (True, False):
        mod.use_plans = plans
        with torch.autocast("cpu", dtype=torch.bfloat16):
            assert lin(x).dtype == torch.bfloat16
            y = mod(x)
            yf = fp8_linear(x, mod.fp8_weight(), bias=mod.bias, backend="reference")
            ya, _ = merged(x)
        for got in (y, yf, ya):
            assert got.dtype == torch.bfloat16  # float32 before: autocast ignored
            torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_autocast_keeps_an_explicit_out_dtype():
    mod = _module(out_dtype=torch.float32)
    x = torch.randn(2, K)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = mod(x)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y, mod(x.bfloat16()), rtol=0, atol=0)


# ----------------------------------------------------------------------------- devices


class _OnCuda(torch.Tensor):
    """A CPU tensor that says it is on cuda:<index> (what the device checks read)."""

    __torch_function__ = torch._C._disabled_torch_function_impl
    index = 1

    @property
    def is_cuda(self):
        return True

    def get_device(self):
        return self.index


@pytest.fixture
def fake_cuda(monkeypatch):
    """cuda:0 current; ``torch.cuda.device(d)`` makes cuda:1 current inside."""
    current = [0]

    @contextlib.contextmanager
    def device(d):
        before, current[0] = current[0], 1
        try:
            yield
        finally:
            current[0] = before

    monkeypatch.setattr(torch.cuda, "device", device)
    monkeypatch.setattr(L, "_CURRENT_DEVICE", lambda: current[0], raising=False)
    monkeypatch.setattr(backends, "current_device", lambda: current[0])
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(L, "_IS_CAPTURING", lambda: False)
    return current


def _record_plan_runs(monkeypatch, current, seen):
    build = P.build

    def recording_build(*a, **kw):
        plan = build(*a, **kw)
        inner = plan.run

        def run(x):
            seen.append(current[0])
            return inner(x)

        plan.run = run
        return plan

    monkeypatch.setattr(P, "build", recording_build)


def test_layer_on_another_cuda_device_runs_under_its_device(monkeypatch, fake_cuda):
    """Triton launches on the current device: a layer on cuda:1 called while cuda:0 is
    current ran its kernels on cuda:0 (Liger-Kernel #1303)."""
    seen = []
    _record_plan_runs(monkeypatch, fake_cuda, seen)
    run_2d = ops.run_2d
    monkeypatch.setattr(ops, "run_2d", lambda *a, **kw: seen.append(fake_cuda[0]) or
                        run_2d(*a, **kw))
    mod = _module()
    x = torch.randn(2, K)
    want = mod(x)
    seen.clear()
    xs = x.as_subclass(_OnCuda)
    for _ in range(2):  # the plan's build, then the cached plan
        torch.testing.assert_close(mod(xs), want, rtol=0, atol=0)
    mod.use_plans = False
    mod(xs)
    fp8_linear(xs, mod.fp8_weight(), bias=mod.bias, backend="reference")
    MergedFp8Linear.from_linears([mod, mod], ["a", "b"])(xs)
    assert seen and seen == [1] * len(seen), seen
    assert fake_cuda[0] == 0  # restored


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 CUDA GPUs")
@pytest.mark.parametrize("backend", ["triton", "auto"])
@pytest.mark.parametrize("scheme", [Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN], ids=str)
def test_layer_on_cuda1_while_cuda0_is_current(backend, scheme):
    torch.cuda.set_device(0)
    mod = _module(scheme, backend).to("cuda:1")
    ref = _module(scheme, "reference").to("cuda:1")
    for m in (1, 3, 1):  # build, then the cached plan
        x = torch.randn(m, K, device="cuda:1", dtype=torch.bfloat16)
        y = mod(x)
        torch.cuda.synchronize(1)
        assert y.device == x.device and torch.cuda.current_device() == 0
        torch.testing.assert_close(y.float(), ref(x).float(), rtol=2e-2, atol=2e-2)


# ----------------------------------------------------------------------------- CUDA graphs


def test_plans_used_under_capture_outlive_the_plan_cache(monkeypatch, fake_cuda, interpret):
    """A captured graph keeps the addresses of a plan's buffers (x's quantized copy and
    scale): clearing the plans (17 shapes, refresh, backend, a dispatch change) freed them,
    and a replay wrote into memory that another tensor could own."""
    mod = _module(Scheme.PER_TENSOR, "triton", act_scale=0.05)
    x = torch.randn(1, K).bfloat16().as_subclass(_OnCuda)
    _OnCuda.index = 0  # on the current device: the plain hot path
    try:
        mod(x)
        (entry,) = mod._plans.values()
        own = {id(t) for t in (mod.weight, mod.weight_scale, mod.input_scale, mod.bias)}
        buffers = [t for d in entry.plan.launches for t in d.args
                   if isinstance(t, torch.Tensor) and id(t) not in own]
        assert buffers  # the activation quantization's outputs
        refs = [weakref.ref(t) for t in buffers]
        del buffers
        monkeypatch.setattr(L, "_IS_CAPTURING", lambda: True)
        y_captured = mod(x)  # the captured call: the plan's kernels, the plan's buffers
        mod(x)
        monkeypatch.setattr(L, "_IS_CAPTURING", lambda: False)
        del entry
        for m in range(2, 2 + P.MAX_PLANS_PER_MODULE):
            mod(torch.randn(m, K).bfloat16().as_subclass(_OnCuda))
        mod.refresh()
        mod.backend = "triton"
        monkeypatch.setattr(dispatch, "_generation", dispatch._generation + 1)
        mod(x)
        gc.collect()
        assert all(r() is not None for r in refs)
        # once, however often captured
        assert sum(type(p) is L._PlanEntry for p in mod._pinned) == 1
        torch.testing.assert_close(mod(x), y_captured, rtol=0, atol=0)
    finally:
        _OnCuda.index = 1


def test_prepared_forms_of_an_unplanned_capture_outlive_refresh(monkeypatch, fake_cuda,
                                                                interpret):
    """Captured unplanned calls (eager-only plans, or none) read the prepared weight's
    tensors (kernel scales, a tile-major copy, split-K counters): refresh() dropped them."""
    mod = _module(Scheme.CHANNEL_TOKEN, "triton")
    mod.use_plans = False
    _OnCuda.index = 0
    try:
        x = torch.randn(2, K).bfloat16().as_subclass(_OnCuda)
        mod(x)
        packed = mod.fp8_weight().packed["triton"]
        refs = [weakref.ref(t) for t in packed.values() if isinstance(t, torch.Tensor)]
        del packed
        monkeypatch.setattr(L, "_IS_CAPTURING", lambda: True)
        y = mod(x)
        mod(x)
        monkeypatch.setattr(L, "_IS_CAPTURING", lambda: False)
        mod.refresh()
        mod.to("cpu")  # _apply: a refresh too
        gc.collect()
        assert refs and all(r() is not None for r in refs)
        assert len(mod._pinned) == len(refs)  # each once
        torch.testing.assert_close(mod(x), y, rtol=0, atol=0)
    finally:
        _OnCuda.index = 1


def test_act_scale_number_is_one_device_tensor(monkeypatch):
    """A number act_scale became a new device tensor on every call: a host-to-device copy,
    which CUDA graph capture refuses."""
    w = quantize_weight(random_weight(N, K, 3), Scheme.PER_TENSOR)
    seen = []
    run_2d = ops.run_2d
    monkeypatch.setattr(ops, "run_2d", lambda x, wt, **kw: seen.append(kw["act_scale"]) or
                        run_2d(x, wt, **kw))
    x = torch.randn(2, K)
    y = [fp8_linear(x, w, act_scale=0.0625, backend="reference") for _ in range(2)]
    assert seen[0] is seen[1] and float(seen[0]) == 0.0625
    torch.testing.assert_close(y[0], y[1], rtol=0, atol=0)
    monkeypatch.setattr(L, "_capturing", lambda x: True)
    fp8_linear(x, w, act_scale=0.0625, backend="reference")  # made before: fine
    assert seen[-1] is seen[0]
    with pytest.raises(RuntimeError, match=r"act_scale=0\.03125 is a number under CUDA graph "
                                           r"capture.*pass a float32 tensor"):
        fp8_linear(x, w, act_scale=0.03125, backend="reference")


def test_same_kernels_as_graphs_nests():
    assert P.eager_one_launch_enabled() == P._eager_twins
    before = P._eager_twins
    with P.same_kernels_as_graphs():
        with P.same_kernels_as_graphs():
            assert not P._eager_twins
        assert not P._eager_twins  # True here before: the inner block restored True
    assert P._eager_twins == before


# ----------------------------------------------------------------------------- meta


@pytest.mark.parametrize("scheme", list(Scheme), ids=str)
def test_meta_to_empty_then_load_state_dict(scheme):
    src = _module(scheme, act_scale=0.05 if scheme is Scheme.PER_TENSOR else None)
    shape = tuple(src.weight_scale.shape)
    meta = Fp8Linear(K, N, scheme, bias=True, static_input_scale=src.input_scale is not None,
                     weight_scale_shape=shape, device="meta", backend="reference")
    mod = meta.to_empty(device="cpu")  # raised: uninitialized scales checked at once
    mod.load_state_dict(src.state_dict())
    x = torch.randn(3, K)
    torch.testing.assert_close(mod(x), src(x), rtol=0, atol=0)


def test_to_empty_without_a_load_is_refused_at_the_first_call():
    mod = Fp8Linear(K, N, "channel_token", device="meta", backend="reference").to_empty(
        device="cpu")
    with torch.no_grad():
        mod.weight_scale.fill_(0.0)  # what uninitialized memory may hold
    with pytest.raises(ValueError, match=r"Fp8Linear\(in_features=384, out_features=80.*"
                                         r"must be finite and > 0, got 0\.0.*load a state_dict"):
        mod(torch.randn(1, K))
    mod.weight_scale.fill_(1.0)  # then loaded: the check passes, once
    assert mod(torch.randn(1, K)).shape == (1, N) and not mod._unchecked
