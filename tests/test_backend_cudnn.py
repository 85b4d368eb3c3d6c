"""The cudnn backend on the CPU: honest availability, the plan-cache keys, dispatch plumbing.

Numerics run on the GPU (tests/test_gpu.py takes every available backend)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from fp8tower import backends
from fp8tower.backends import BackendError
from fp8tower.backends import cudnn as cudnn_backend
from fp8tower.dispatch import Dispatcher
from fp8tower.formats import FP8_DTYPE, Fp8Weight, Scheme
from fp8tower.problem import GemmProblem
from fp8tower.tuning import tuner

GPU = (9, 0)
HAS_CUDNN_AND_GPU = importlib.util.find_spec("cudnn") is not None and torch.cuda.is_available()


@pytest.fixture
def fresh_reason():
    cudnn_backend._unavailable.cache_clear()
    yield
    cudnn_backend._unavailable.cache_clear()


def gpu_problem(m=4, n=256, k=512, scheme="per_tensor", **kw) -> GemmProblem:
    return GemmProblem(m=m, n=n, k=k, scheme=scheme, capability=GPU, **kw)


# ----------------------------------------------------------------------------- availability


def test_registered_in_fallback_order_after_cublaslt():
    names = backends.names()
    assert "cudnn" in names
    assert names.index("cublaslt") < names.index("cudnn") < names.index("reference")


@pytest.mark.skipif(HAS_CUDNN_AND_GPU, reason="the package and a GPU are here")
def test_unavailable_names_what_is_missing():
    reason = backends.get("cudnn").unavailable_reason()
    if importlib.util.find_spec("cudnn") is None:
        assert "nvidia-cudnn-frontend" in reason and "fp8tower[cudnn]" in reason
    else:
        assert "CUDA GPU" in reason


def test_missing_package_is_the_reason_even_with_a_gpu(monkeypatch, fresh_reason):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "cudnn" else real(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert "nvidia-cudnn-frontend" in cudnn_backend._unavailable()


def test_package_without_gpu_says_gpu(monkeypatch, fresh_reason):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "cudnn" else real(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert cudnn_backend._unavailable() == "needs a CUDA GPU (cuDNN)"


def test_old_gpu_is_refused_before_loading_cudnn(monkeypatch, fresh_reason):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: object() if name == "cudnn" else real(name, *a))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: (8, 0))
    monkeypatch.setattr(cudnn_backend, "_cudnn", lambda: pytest.fail("imported cudnn"))
    assert "8.9" in cudnn_backend._unavailable()


@pytest.mark.skipif(HAS_CUDNN_AND_GPU, reason="the package and a GPU are here")
def test_no_gpu_work_without_the_backend():
    """Unavailable: check() gives only the static reasons, configs() is empty (no probe)."""
    be = backends.get("cudnn")
    p = gpu_problem()
    assert be.check(p) is None  # statically servable; unavailable_reason says why not here
    assert be.configs(p) == [] and be.default_config(p) == {"plan": 0}
    assert cudnn_backend.versions() == {}


# ----------------------------------------------------------------------------- check


@pytest.mark.parametrize("problem, needle", [
    (GemmProblem(4, 256, 512, "per_tensor"), "CUDA tensor"),
    (gpu_problem(scheme="block128"), "not block128"),
    (gpu_problem(scheme="weight_only"), "not weight_only"),
    (gpu_problem(n=250), "multiples of 16"),
    (gpu_problem(k=520 + 4), "multiples of 16"),
    (gpu_problem(out_dtype=torch.float32), "bfloat16 or float16"),
    (gpu_problem(act_dtype=torch.float32), "activations"),
    (gpu_problem(scheme="channel_token", act_dtype=FP8_DTYPE), "activations"),
    (GemmProblem(4, 256, 512, "per_tensor", capability=(8, 0)), "8.9"),
])
def test_check_reasons(problem, needle):
    reason = backends.get("cudnn").check(problem)
    assert reason is not None and needle in reason


@pytest.mark.skipif(HAS_CUDNN_AND_GPU, reason="would probe the GPU")
@pytest.mark.parametrize("problem", [
    gpu_problem(), gpu_problem(scheme="channel_token"), gpu_problem(out_dtype=torch.float16),
    gpu_problem(act_dtype=FP8_DTYPE), gpu_problem(channel_weight_scale=True),
])
def test_check_accepts(problem):
    assert backends.get("cudnn").check(problem) is None


# ----------------------------------------------------------------------------- plan-cache keys


def test_scale_layout():
    assert cudnn_backend.scale_layout(gpu_problem()) == ("tensor", "tensor")
    assert cudnn_backend.scale_layout(gpu_problem(channel_weight_scale=True)) == \
        ("tensor", "channel")
    assert cudnn_backend.scale_layout(gpu_problem(scheme="channel_token")) == ("token", "channel")


def test_graph_key_separates_what_changes_the_graph():
    key = cudnn_backend.graph_key
    base = key(gpu_problem(m=4), 0)
    # The graph is shape-static: every M has its own graph, even within one bucket.
    assert key(gpu_problem(m=3), 0) != base and gpu_problem(m=3).bucket == gpu_problem(m=4).bucket
    for other in (gpu_problem(n=512), gpu_problem(k=1024), gpu_problem(scheme="channel_token"),
                  gpu_problem(channel_weight_scale=True), gpu_problem(out_dtype=torch.float16)):
        assert key(other, 0) != base
    assert key(gpu_problem(m=4), 1) != base  # device
    # What reaches the graph is FP8 either way: the activation dtype and the static/dynamic
    # activation scale share one graph.
    assert key(gpu_problem(act_dtype=torch.float16), 0) == base
    assert key(gpu_problem(static_act_scale=True), 0) == base


def test_plan_key_adds_the_plan_index():
    p = gpu_problem()
    assert cudnn_backend.plan_key(p, 0, 2) == (*cudnn_backend.graph_key(p, 0), 2)
    assert cudnn_backend.plan_key(p, 0, 2) != cudnn_backend.plan_key(p, 0, 3)


def _entry(built: dict[int, str | None], n_plans: int):
    return cudnn_backend.GraphEntry(graph=None, n_plans=n_plans, built=dict(built))


def test_buildable_keeps_list_order_and_limit():
    e = _entry({3: None, 0: "declined", 1: None, 2: None, 5: None}, 6)
    assert e.buildable(3) == [1, 2, 3]
    assert e.buildable(1) == [1]


def test_plan_walk_takes_the_tuned_index_or_the_next_that_builds(monkeypatch):
    e = _entry({0: None, 1: "no", 2: None, 3: "no"}, 4)
    monkeypatch.setattr(cudnn_backend, "_build_plan", lambda entry, i, dev: entry.built[i])
    p = gpu_problem()
    assert cudnn_backend._first_built_from(e, 0, 0, p) == 0
    assert cudnn_backend._first_built_from(e, 1, 0, p) == 2
    assert cudnn_backend._first_built_from(e, 3, 0, p) == 0  # wraps to the list's start
    assert cudnn_backend._first_built_from(e, 7, 0, p) == 0  # tuned where the list was longer
    none = _entry({0: "no", 1: "no"}, 2)
    with pytest.raises(BackendError, match=r"no cuDNN plan from index 1 .*plan 1: no"):
        cudnn_backend._first_built_from(none, 1, 0, p)


# ----------------------------------------------------------------------------- prepare


@pytest.mark.parametrize("scheme, scale_shape, expect", [
    (Scheme.PER_TENSOR, (), (1,)),
    (Scheme.PER_TENSOR, (64,), (64,)),  # an exact merge: per-channel vector
    (Scheme.CHANNEL_TOKEN, (64,), (64,)),
])
def test_prepare_scale_layout(scheme, scale_shape, expect):
    data = torch.randn(64, 32).to(FP8_DTYPE)
    w = Fp8Weight(data, torch.rand(scale_shape) + 0.5, scheme)
    sb = backends.get("cudnn").prepare(w)["scale_b"]
    assert tuple(sb.shape) == expect and sb.dtype == torch.float32 and sb.is_contiguous()
    assert torch.equal(sb, w.scale.float().reshape(-1).expand(expect[0]))


def test_prepare_hands_the_graph_row_major_weights():
    """The graph reads W's bytes as row-major (N, K) (_build_graph's strides): a strided
    Fp8Weight.data (here a transposed copy's view, strides (1, N)) is packed as a contiguous
    copy with the same values; contiguous data is packed as it is (no copy). _run passed
    weight.data itself, misread for such a weight (GPU: tests/test_gpu.py)."""
    data = torch.randn(32, 64).to(FP8_DTYPE)
    strided = data.t().contiguous().t()
    assert not strided.is_contiguous()
    be = backends.get("cudnn")
    w = be.prepare(Fp8Weight(strided, torch.rand(()) + 0.5, Scheme.PER_TENSOR))["w"]
    assert w.is_contiguous() and torch.equal(w.view(torch.uint8), data.view(torch.uint8))
    plain = Fp8Weight(data, torch.rand(()) + 0.5, Scheme.PER_TENSOR)
    assert be.prepare(plain)["w"].data_ptr() == data.data_ptr()


# ----------------------------------------------------------------------------- dispatch


@pytest.mark.skipif(HAS_CUDNN_AND_GPU, reason="the package and a GPU are here")
def test_explicit_request_names_the_reason():
    d = Dispatcher(tune=False, persist=False)
    reason = backends.get("cudnn").unavailable_reason()
    with pytest.raises(BackendError, match=r"'cudnn' cannot serve .*: " + reason.split(" (")[0]):
        d.resolve(gpu_problem(), "cudnn")


@pytest.mark.skipif(HAS_CUDNN_AND_GPU, reason="the package and a GPU are here")
def test_auto_skips_it_with_its_reason():
    cudnn = backends.get("cudnn")
    ref = backends.get("reference")
    d = Dispatcher(candidates=[cudnn, ref], tune=False, persist=False)
    assert cudnn not in tuner.tunable(d, gpu_problem())
    assert d.resolve(gpu_problem(), "auto")[0] is not cudnn
    alone = Dispatcher(candidates=[cudnn], tune=False, persist=False)
    with pytest.raises(BackendError, match=r"no backend can serve .*cudnn: "):
        alone.resolve(gpu_problem(), "auto")


@pytest.mark.parametrize("name", [
    # Kernel names one call launched on the H200 (2026-11-30, cuDNN 9.19, frontend 1.32).
    "_fp8_act_quant_kernel",
    "nvjet_sm90_qqtst_64x8_128x16_4x1_v_bz_algo2_TNT",
    "Memset (Device)",
    "cudnn_generated_fort_native_sm80_matMul_pointwise_pointwise_knob_39_16x64x64_8_0",
])
def test_kernel_family_matches_what_it_launched(name):
    assert backends.get("cudnn").kernel_regex().search(name)
