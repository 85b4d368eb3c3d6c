"""The tuning / dispatch audit of 2026-12-05 (/tmp/audit_tune/a1..a10): the untuned rule at
the bucket, bias keys, prefill, FP8 tuning operands, the rule's GPU, cache metadata, near
ties, cache entries off their bucket, empty split-K programs."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
import torch
from test_tuning import FakeClock, FakeTimer, cpu_problem, entry_with, fake_backend

from fp8tower import dispatch, provenance
from fp8tower.dispatch import Dispatcher
from fp8tower.formats import FP8_DTYPE, Scheme, dequantize_activation
from fp8tower.problem import GemmProblem
from fp8tower.tuning import cache as tcache
from fp8tower.tuning import search as tsearch
from fp8tower.tuning import timer as ttimer
from fp8tower.tuning.cache import DecisionCache, Entry, EntryError, Measurement

H200 = "NVIDIA H200"


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path / "cache"))
    for var in ("FP8TOWER_TUNE", "FP8TOWER_RETUNE", "FP8TOWER_EARLY_LAUNCH", "FP8TOWER_BACKENDS"):
        monkeypatch.delenv(var, raising=False)
    dispatch.reset()
    yield
    dispatch.reset()


def sm90(m=4, n=64, k=32, scheme="per_tensor", **kw) -> GemmProblem:
    return GemmProblem(m=m, n=n, k=k, scheme=scheme, capability=(9, 0), **kw)


def named_pair(clock, rule=lambda p, gpu=None: None):
    """Fakes named as the registry's first two: 'triton' (with ``rule`` as its
    untuned_defers_to) and 'cublaslt' (the BASELINE)."""
    tri = dataclasses.replace(fake_backend("triton", clock, {"default": 5.0}),
                              untuned_defers_to=rule)
    return [tri, fake_backend("cublaslt", clock, {"default": 6.0})]


# ------------------------------------------------------------- 1. the rule at the bucket


def test_the_untuned_rule_is_evaluated_at_the_bucket_not_the_call_m():
    """The rule's thresholds are at power-of-two M: M = 17-31 share bucket 32's decision (it
    was evaluated at the call's M: M = 24 got the Triton default, M = 32 cuBLASLt)."""
    clock = FakeClock()
    seen = []

    def rule(p, gpu=None):
        seen.append(p.m)
        return "cublaslt" if p.m >= 32 else None

    d = Dispatcher(candidates=named_pair(clock, rule), tune=False, persist=False, gpu_name=H200)
    for m in (17, 24, 31, 32):
        assert d.resolve(sm90(m=m))[0].name == "cublaslt", m
    assert d.resolve(sm90(m=16))[0].name == "triton"
    assert set(seen) == {32, 16}  # only ever asked at a bucket


def test_the_triton_rule_at_non_power_of_two_m(interpret):
    """a4_safe_default.py with the real rule: per_tensor 10240x5120 at M = 17-31 took the
    Triton default that lost to cuBLASLt at M = 32 by up to 36%; block128 at 33-63 the same."""
    from fp8tower import backends

    tri = backends.get("triton")
    lt = dataclasses.replace(backends.get("cublaslt"), unavailable_reason=lambda: None)
    d = Dispatcher(candidates=[tri, lt], tune=False, persist=False, gpu_name=H200)
    for scheme, ms in (("per_tensor", (17, 24, 31)), ("block128", (33, 48, 63))):
        for m in ms:
            b, cfg = d.resolve(sm90(m=m, n=10240, k=5120, scheme=scheme))
            assert b.name == "cublaslt", (scheme, m)
    b, cfg = d.resolve(sm90(m=24, n=1024, k=5120, scheme="channel_token"))
    bucket = sm90(m=32, n=1024, k=5120, scheme="channel_token")
    assert b.name == "triton" and cfg == tri.default_config(bucket)  # the bucket's default


# ------------------------------------------------------------------------- 2. bias


def test_a_bias_is_in_the_key_only_when_the_call_has_one():
    """Existing keys (committed caches, e.g. results/wo_token_H200_2026-12-04/call6/) must not
    move: the bias is a key part only when set."""
    p = sm90(m=8, n=10240, k=5120, static_act_scale=True)
    assert p.key() == "m8_n10240_k5120_per_tensor-static_bfloat16_bfloat16_sm90"
    assert dataclasses.replace(p, has_bias=True).key() == \
        "m8_n10240_k5120_per_tensor-static-bias_bfloat16_bfloat16_sm90"
    assert dataclasses.replace(p, has_bias=True).bytes_moved() == p.bytes_moved() + 10240 * 2

    class W:  # what for_call reads of an Fp8Weight
        n, k, scheme, act_scale = 48, 32, Scheme.CHANNEL_TOKEN, None
        scale = torch.ones(48)

    x = torch.zeros(3, 32, dtype=torch.bfloat16)
    assert not GemmProblem.for_call(x, W(), torch.bfloat16).has_bias
    assert GemmProblem.for_call(x, W(), torch.bfloat16, bias=torch.zeros(48)).has_bias


def test_a_bias_problem_is_timed_with_a_bias():
    """The tuner timed every candidate with bias=None, while cuBLASLt / CUTLASS / cuDNN add a
    bias with a kernel of their own and Triton fuses it."""
    clock = FakeClock()
    seen = []
    base = fake_backend("a", clock, {"default": 1.0})

    def run(x, weight, packed, *, act_scale, bias, out_dtype, config):
        seen.append(None if bias is None else (tuple(bias.shape), bias.dtype))
        return base.run(x, weight, packed, act_scale=act_scale, bias=bias,
                        out_dtype=out_dtype, config=config)

    a = dataclasses.replace(base, run=run)
    e = tsearch.tune_problem(dataclasses.replace(cpu_problem(), has_bias=True), [a],
                             timer=FakeTimer(clock))
    assert seen == [((48,), torch.bfloat16)] and e.problem.has_bias
    seen.clear()
    tsearch.tune_problem(cpu_problem(), [a], timer=FakeTimer(clock))
    assert seen == [None]
    # the key it is cached under round-trips through the file
    raw = json.loads(json.dumps(e.to_json()))
    assert Entry.from_json(e.key, raw).problem.has_bias and "-bias_" in e.key


def test_the_printed_tune_command_carries_the_bias():
    assert " --bias" in dispatch.tune_command(sm90(has_bias=True))
    assert "--bias" not in dispatch.tune_command(sm90())


# ----------------------------------------------------------------------- 3. prefill


def test_prefill_is_not_tuned_implicitly_and_defaults_to_cublaslt(monkeypatch):
    """M > 64: a serving call tuned at each new power-of-two prompt length, and untuned
    channel_token / block128 stayed on the Triton decode kernel at any M."""
    clock = FakeClock()
    timer = FakeTimer(clock)
    d = Dispatcher(candidates=named_pair(clock), timer=timer, gpu_name=H200, persist=False)
    assert d.may_tune(sm90(m=64)) and not d.may_tune(sm90(m=65))
    for m in (65, 100, 4096):
        assert d.resolve(sm90(m=m, scheme="channel_token"))[0].name == "cublaslt"
    assert timer.calls == 0 and d.stats["defaults"] == 3
    # only cuBLASLt is preferred where it can serve: else the first able one (Triton)
    lt_unable = named_pair(clock)
    lt_unable[1] = dataclasses.replace(lt_unable[1], check=lambda p: "cannot (fake)")
    d = Dispatcher(candidates=lt_unable, tune=False, persist=False, gpu_name=H200)
    assert d.resolve(sm90(m=512, scheme="weight_only"))[0].name == "triton"
    # asked explicitly: FP8TOWER_RETUNE, or a dispatcher told to tune
    monkeypatch.setenv("FP8TOWER_RETUNE", "1")
    assert Dispatcher(candidates=named_pair(clock), gpu_name=H200).may_tune(sm90(m=100))
    assert Dispatcher(candidates=named_pair(clock), tune=True).may_tune(sm90(m=100))


# ------------------------------------------------------------- 4. FP8 tuning operands


@pytest.mark.parametrize("scheme,shape", [("per_tensor", ()), ("channel_token", (3,)),
                                          ("block128", (3, 3))])
def test_fp8_tuning_activations_carry_their_schemes_scales(scheme, shape):
    """Every scheme got a scalar act_scale = 0.01: block128 then crashed cuBLASLt (IndexError,
    not a GPU error), channel_token was timed with a broadcast scalar."""
    p = GemmProblem(m=3, n=256, k=320, scheme=scheme, act_dtype=FP8_DTYPE, capability=(9, 0),
                    static_act_scale=scheme == "per_tensor")
    x, act_scale, _ = tsearch.tuning_operands(p, torch.device("cpu"), 1)
    assert x.dtype == FP8_DTYPE and x.shape == (3, 320)
    assert tuple(act_scale.shape) == shape and bool((act_scale > 0).all())
    xd = dequantize_activation(x, act_scale, Scheme.parse(scheme))
    assert bool(torch.isfinite(xd).all()) and float(xd.abs().max()) > 1.0  # randn-sized


def test_fp8_block128_tuning_operands_reach_cublaslt_blockwise_call(monkeypatch):
    """a5_fp8x_block128.py: the tuner's operands through cuBLASLt's block-wise path (its
    scaled_mm faked: the CPU has none) give (M padded to 16, K/128) activation scales."""
    from fp8tower.backends import cublaslt

    got = {}

    class FakeF:
        class ScalingType:
            BlockWise1x128, BlockWise128x128 = "1x128", "128x128"

        @staticmethod
        def scaled_mm(a, b, sa, ta, sb, tb, output_dtype):
            got.update(a=tuple(a.shape), sa=tuple(sa.shape), sb=tuple(sb.shape))
            return torch.zeros(a.shape[0], b.shape[1], dtype=output_dtype)

    monkeypatch.setattr(cublaslt, "_blockwise_api", lambda: FakeF)
    p = GemmProblem(m=1, n=256, k=256, scheme="block128", act_dtype=FP8_DTYPE,
                    capability=(9, 0))
    x, act_scale, ws = tsearch.tuning_operands(p, torch.device("cpu"), 1)
    y = cublaslt._run(x, ws[0], cublaslt._prepare(ws[0]), act_scale=act_scale,
                      out_dtype=torch.bfloat16)
    assert y.shape == (1, 256) and got == {"a": (16, 256), "sa": (16, 2), "sb": (4, 2)}


@pytest.mark.parametrize("k", [256, 512, 1280, 5120])
def test_cublaslt_blockwise_weight_scales_pad_k_blocks_to_4(k):
    """torch's 1x128 x 128x128 recipe wants scale_b (L4, N/128), strides (1, L4), L4 = K/128
    rounded up to 4: K=1280 was refused on the H200 ("scale_b must have shape 12 x 8")."""
    from fp8tower.backends import cublaslt
    from fp8tower.formats import quantize_weight

    w = quantize_weight(torch.randn(384, k) * 0.02, Scheme.BLOCK128)
    sb = cublaslt._prepare(w)["scale_b"]
    l4 = -(-(k // 128) // 4) * 4
    assert sb.shape == (l4, 3) and sb.stride() == (1, l4) and sb.dtype == torch.float32
    assert torch.equal(sb[: k // 128], w.scale.float().t())


def test_fp8_weight_only_tuning_operands_are_refused_by_name():
    p = GemmProblem(m=1, n=64, k=64, scheme="weight_only", act_dtype=FP8_DTYPE)
    with pytest.raises(ValueError, match="weight_only takes bf16/fp16/fp32 activations"):
        tsearch.tuning_operands(p, torch.device("cpu"), 1)
    # nothing able to serve it: an empty entry, no operands built
    assert not tsearch.tune_problem(p, [], timer=FakeTimer(FakeClock())).ranked()


# ----------------------------------------------------------- 5. the rule's own GPU


def test_the_untuned_rule_applies_only_on_the_gpus_it_was_measured_on():
    """Its wave math is the H200's and the H100 SXM's (132 SMs), each GPU's name passed to
    the rule (the H100 has deferrals of its own); elsewhere cuBLASLt serves untuned where it
    can, weight_only (no cuBLASLt path) takes Triton's default."""
    clock = FakeClock()
    asked = []

    def keeps_triton(p, gpu=None):
        asked.append(gpu)

    pair = named_pair(clock, rule=keeps_triton)
    for gpu in (H200, "NVIDIA H100 80GB HBM3"):
        on = Dispatcher(candidates=pair, tune=False, persist=False, gpu_name=gpu)
        assert on.resolve(sm90(scheme="channel_token"))[0].name == "triton"
    assert asked == [H200, "NVIDIA H100 80GB HBM3"]
    other = Dispatcher(candidates=pair, tune=False, persist=False, gpu_name="NVIDIA H100 PCIe")
    assert other.resolve(sm90(scheme="channel_token"))[0].name == "cublaslt"
    pair[1] = dataclasses.replace(pair[1], check=lambda p: (
        "cuBLASLt FP8 GEMMs need FP8 on both operands" if p.scheme is Scheme.WEIGHT_ONLY
        else None))
    other = Dispatcher(candidates=pair, tune=False, persist=False, gpu_name="NVIDIA L40S")
    assert other.resolve(sm90(scheme="weight_only"))[0].name == "triton"
    # CPU problems (the interpreter, tests) keep the rule
    cpu = Dispatcher(candidates=named_pair(clock, rule=lambda p, gpu=None: "cublaslt"), tune=False,
                     persist=False)
    assert cpu.resolve(cpu_problem())[0].name == "cublaslt"


# ----------------------------------------------------------------- 6. cache metadata


def test_the_cache_records_whether_graphs_launched_early(tmp_path, monkeypatch):
    """A cache timed with PDL edges moved (graph_edges.capture) is not evidence for graphs
    without (FP8TOWER_EARLY_LAUNCH=0, or a driver without the edge API: then capture only
    warns)."""
    monkeypatch.setattr(ttimer, "_can_edit_graphs", lambda: True)
    assert tcache.environment_meta(H200)["early_launch"] is True
    assert tcache.environment_meta(None)["early_launch"] is None  # the CPU: no graphs
    e = entry_with({"a": 5.0})
    DecisionCache.for_device(tmp_path, H200).save({e.key: e})
    monkeypatch.setenv("FP8TOWER_EARLY_LAUNCH", "0")
    assert tcache.environment_meta(H200)["early_launch"] is False
    # the switch off reads its own file (paths.cache_file_name): the default one stays
    assert DecisionCache.for_device(tmp_path, H200).load() == {}
    monkeypatch.delenv("FP8TOWER_EARLY_LAUNCH")
    assert e.key in DecisionCache.for_device(tmp_path, H200).load()
    monkeypatch.setattr(ttimer, "_can_edit_graphs", lambda: False)  # a driver without it
    with pytest.warns(tcache.TuningCacheWarning, match="early_launch True != False"):
        assert DecisionCache.for_device(tmp_path, H200).load() == {}


@pytest.mark.parametrize("edited", ["tuning/search.py", "graph_edges.py"])
def test_the_code_hash_covers_the_tuner_and_the_graph_edges(tmp_path, monkeypatch, edited):
    src = tmp_path / "fp8tower"
    for f in ("kernels/k.py", "backends/b.py", "tuning/search.py", "graph_edges.py",
              "dispatch.py"):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        (src / f).write_text("a")
    monkeypatch.setattr(provenance, "__file__", str(src / "provenance.py"))
    provenance.kernel_code.cache_clear()
    try:
        first = provenance.kernel_code()
        (src / "dispatch.py").write_text("b")  # not timing code
        provenance.kernel_code.cache_clear()
        assert provenance.kernel_code() == first
        (src / edited).write_text("b")
        provenance.kernel_code.cache_clear()
        assert provenance.kernel_code() != first
    finally:
        monkeypatch.undo()
        provenance.kernel_code.cache_clear()


# -------------------------------------------------------------------- 7. near ties


def _near(margin: float, spread: float) -> Entry:
    p = cpu_problem(m=4)
    cands = [Measurement("a", None, 10.0, 9.9, spread, 1.0),
             Measurement("b", None, 10.0 * (1 + margin), 9.9, spread, 1.0)]
    return Entry(p, "a", None, "d", cands)


def test_a_margin_within_the_spread_is_marked_within_noise(tmp_path):
    assert _near(0.03, 0.05).within_noise() is True
    assert _near(0.08, 0.05).within_noise() is False
    assert entry_with({"a": 5.0}).within_noise() is None  # no runner-up
    e = _near(0.03, 0.05)
    assert tcache.explain_row(e)["within_noise"] is True
    assert e.to_json()["within_noise"] is True
    assert Entry.from_json(e.key, json.loads(json.dumps(e.to_json()))).within_noise()
    # and in `fp8tower dispatch --explain`
    from typer.testing import CliRunner

    from fp8tower.cli.tune import app

    path = tmp_path / "c.json"
    DecisionCache(path, tcache.environment_meta(None)).save({e.key: e})
    res = CliRunner().invoke(app, ["dispatch", "--file", str(path), "--explain"])
    assert res.exit_code == 0 and "+3.0% within noise" in res.output, res.output


# ---------------------------------------------------------- 10. entries, empty splits


def test_an_entry_off_its_bucket_is_refused():
    """m = 3 under an m4_ key: the tuner times at the bucket, so such an entry was not made
    by it (it loaded)."""
    e = entry_with({"a": 5.0, "b": 7.0}, cpu_problem(m=4))
    raw = json.loads(json.dumps(e.to_json()))
    raw["problem"]["m"] = 3
    with pytest.raises(EntryError, match="problem.m is 3, expected its bucket's M 4"):
        Entry.from_json(e.key, raw)


def test_configs_with_an_empty_split_are_searched_not_refused():
    """K = 2304 at BLOCK_K 256: 9 K steps; split 4 gives 3, 3, 3 and nothing. Left out of
    what the tuner samples, still valid where a cache holds one."""
    from fp8tower.backends.triton_gemm import BACKEND as triton

    p = sm90(m=8, n=1088, k=2304)
    space = triton.configs(p)
    empty = [c for c in space if tsearch.empty_split(p, c)]
    assert empty and any(c["split_k"] == 4 and c["block_k"] == 256 for c in empty)
    planned = tsearch.planned_configs(p, triton, 10_000)
    assert not any(tsearch.empty_split(p, c) for c in planned[1:])
    assert len(planned) > 1
    assert tsearch.native_config(triton, p, empty[0])[0]  # a cached choice stays valid
    assert not tsearch.empty_split(p, {"block_k": 256, "split_k": 3})  # 3, 3, 3
    assert not tsearch.empty_split(p, {"sched": "sk", "splits": 4})  # not a Triton config


def test_the_tuner_times_no_empty_split_beyond_the_default():
    clock = FakeClock()
    cfgs = [{"id": "e", "block_k": 256, "split_k": 4}, {"id": "f", "block_k": 256, "split_k": 3}]
    a = dataclasses.replace(fake_backend("a", clock, {"default": 9.0, "e": 1.0, "f": 2.0}),
                            configs=lambda p: cfgs)
    p = GemmProblem(m=4, n=48, k=2304, scheme="channel_token")
    e = tsearch.tune_problem(p, [a], timer=FakeTimer(clock))
    assert [c.config for c in e.candidates] == [None, cfgs[1]]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert e.config == cfgs[1]


@pytest.mark.parametrize("planned", [True, False])
def test_a_layer_with_a_bias_asks_dispatch_for_the_bias_key(planned, monkeypatch):
    """Fp8Linear (planned or not) and fp8_linear pose the bias problem: a winner timed
    without the bias kernel other backends launch is not served to a layer that has one."""
    from fp8tower import dispatch as dsp
    from fp8tower.nn.linear import Fp8Linear

    monkeypatch.setenv("FP8TOWER_PLAN", "1" if planned else "0")
    seen = []
    real = dsp.resolve

    def spy(problem, backend="auto", graph=False):
        seen.append(problem)
        return real(problem, "reference", graph=graph)

    monkeypatch.setattr(dsp, "resolve", spy)
    lin = torch.nn.Linear(64, 48, bias=True)
    layer = Fp8Linear.from_linear(lin, "channel_token", backend="reference")
    layer(torch.randn(2, 64, dtype=torch.bfloat16))
    assert seen and all(p.has_bias for p in seen)


def test_a_run_without_early_launch_keeps_its_own_cache_file(monkeypatch, tmp_path):
    """FP8TOWER_EARLY_LAUNCH=0 times graphs another way (the metadata records it): such a
    run reads and writes its own file, so an A/B with the switch off neither discards nor
    overwrites the default file's choices."""
    from fp8tower.paths import cache_file_name
    from fp8tower.provenance import tuning_cache

    monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FP8TOWER_EARLY_LAUNCH", raising=False)
    assert cache_file_name("NVIDIA H200") == "nvidia-h200.json"
    monkeypatch.setenv("FP8TOWER_EARLY_LAUNCH", "0")
    assert cache_file_name("NVIDIA H200") == "nvidia-h200-no-early-launch.json"
    assert tuning_cache("NVIDIA H200")["path"].endswith("nvidia-h200-no-early-launch.json")
