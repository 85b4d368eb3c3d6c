"""The decode-step tower on the CPU: shapes, bytes, data flow, arms, timing, trace capture."""

import math

import pytest
import torch

from fp8tower import backends
from fp8tower.backends import BackendError
from fp8tower.formats import FP8_DTYPE, Scheme, sqnr_db
from fp8tower.models import ALL_PARTS, get_spec
from fp8tower.nn.linear import Fp8Linear
from fp8tower.nn.merged import MergedFp8Linear, MergeError
from fp8tower.tower.build import STANDIN_REGEX, build_tower, plan_mix, random_fp8_weight
from fp8tower.tower.timing import time_tower

MIN_DB = 40.0
SPEC = get_spec("tiny-hybrid")
SCHEMES_MERGEABLE = (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN, Scheme.WEIGHT_ONLY)


def _gemm_ops(tower):
    return [op for op in tower.ops() if op.kind == "gemm"]


@pytest.mark.parametrize("arm", ("unmerged", "merged"))
def test_op_count_shapes_and_bytes(arm):
    tower = build_tower(SPEC, arm=arm)
    gemms = SPEC.gemms(merged=arm == "merged")
    ops = _gemm_ops(tower)
    assert tower.gemm_count() == len(ops) == len(gemms)
    assert [(op.n, op.k) for op in ops] == [(g.n, g.k) for g in gemms]
    assert tower.fp8_bytes() == SPEC.fp8_bytes() == sum(op.n * op.k for op in ops)
    for op, mod in zip(ops, tower.modules()):
        w = mod.fp8_weight()
        assert w.data.dtype == FP8_DTYPE and w.shape == (op.n, op.k)
        assert op.bytes == op.n * op.k + w.scale.numel() * 4
        assert op.kernel_family == backends.get(op.backend).kernel_family
    assert tower.weight_bytes() == sum(op.bytes for op in ops)
    merged = [m for m in tower.modules() if isinstance(m, MergedFp8Linear)]
    if arm == "unmerged":
        assert len(ops) == len(SPEC.linears(fp8_only=True)) == 13
        assert not merged
    else:
        assert len(merged) == len(SPEC.merge_groups()) == 4
        assert len(ops) == 8


def test_labels_groups_and_standins():
    un, mg = build_tower(SPEC), build_tower(SPEC, arm="merged")
    labels = [op.label for op in un.ops()]
    assert labels[:4] == ["gdn.in_proj_qkv", "gdn.in_proj_z", "standin.gdn_core_out",
                          "gdn.out_proj"]
    assert labels[-5:] == ["attention.q_proj", "attention.k_proj", "attention.v_proj",
                           "standin.attn_core_out", "attention.o_proj"]
    m_ops = mg.ops()
    assert m_ops[0].label == "gdn.in_proj_qkv+in_proj_z"
    assert m_ops[0].members == ("layers.0.linear_attn.in_proj_qkv",
                                "layers.0.linear_attn.in_proj_z")
    # Arms line up on groups: merged in_proj_qkv+in_proj_z vs unmerged in_proj_qkv, in_proj_z.
    assert {op.group for op in un.ops()} == {op.group for op in m_ops}
    assert m_ops[0].group == un.ops()[0].group == "gdn.gdn_in"
    standins = [op for op in un.ops() if op.kind == "standin"]
    assert len(standins) == SPEC.num_layers  # one mixer stand-in per layer
    assert all(op.kernel_family == STANDIN_REGEX and op.bytes == 0 for op in standins)


@pytest.mark.parametrize("scheme", list(Scheme))
@pytest.mark.parametrize("m", (1, 3))
def test_step_runs_and_outputs_are_finite(scheme, m):
    tower = build_tower(SPEC, scheme=scheme, m=m)
    y = tower.step(tower.static_x)
    assert y.shape == (m, SPEC.hidden_size) and y.dtype == torch.bfloat16
    assert bool(torch.isfinite(y).all())
    rms = float(y.float().square().mean().sqrt())
    assert 0.2 < rms < 5.0  # unit-RMS design: no blow-up, no collapse


@pytest.mark.parametrize("scheme", SCHEMES_MERGEABLE)
@pytest.mark.parametrize("m", (1, 3))
def test_merged_and_unmerged_compute_the_same_step(scheme, m):
    un = build_tower(SPEC, scheme=scheme, m=m, seed=7)
    mg = build_tower(SPEC, scheme=scheme, m=m, seed=7, arm="merged")
    assert torch.equal(un.static_x, mg.static_x)
    y_un, y_mg = un.step(un.static_x), mg.step(mg.static_x)
    assert sqnr_db(y_un.float(), y_mg.float()) >= MIN_DB
    # The merged weight is the unmerged weights stacked: the same per-linear weights.
    merged0 = mg.modules()[0]
    stacked = torch.cat([un.modules()[0].weight, un.modules()[1].weight])
    assert torch.equal(merged0.linear.weight.view(torch.uint8), stacked.view(torch.uint8))


def test_merged_and_unmerged_triton_interpreter(interpret):
    # Both arms quantize the same activations in-kernel, so the interpreter's fp32->fp8
    # carry bug (DESIGN.md) hits them alike: arm vs arm, not vs the reference.
    un = build_tower(SPEC, backend="triton")
    mg = build_tower(SPEC, backend="triton", arm="merged")
    assert all(op.backend == "triton" for op in _gemm_ops(mg))
    assert sqnr_db(un.step(un.static_x).float(), mg.step(mg.static_x).float()) >= MIN_DB


def test_block128_merged_arm_needs_128_multiples():
    with pytest.raises(MergeError, match="in_proj_qkv has N=320, not a multiple of 128"):
        build_tower(SPEC, scheme="block128", arm="merged")


def test_requant_max_arm_builds():
    tower = build_tower(SPEC, arm="merged", merge_mode="requant_max")
    assert all(m.fp8_weight().scale.numel() == 1 for m in tower.modules())
    assert bool(torch.isfinite(tower.step(tower.static_x)).all())


def test_include_mlp():
    tower = build_tower(SPEC, parts=ALL_PARTS, arm="merged")
    assert tower.gemm_count() == len(SPEC.gemms(ALL_PARTS, merged=True))
    assert tower.fp8_bytes() == SPEC.fp8_bytes(ALL_PARTS)
    labels = [op.label for op in tower.ops()]
    assert "standin.mlp_act" in labels and "mlp.gate_proj+up_proj" in labels
    assert bool(torch.isfinite(tower.step(tower.static_x)).all())


def test_seeded_and_deterministic():
    a, b = build_tower(SPEC, seed=3), build_tower(SPEC, seed=3)
    assert torch.equal(a.step(a.static_x), b.step(b.static_x))
    c = build_tower(SPEC, seed=4)
    assert not torch.equal(a.modules()[0].weight.view(torch.uint8),
                           c.modules()[0].weight.view(torch.uint8))


@pytest.mark.parametrize("scheme,shape", [
    ("per_tensor", ()), ("channel_token", (300,)), ("weight_only", (300,)),
    ("block128", (3, 2)),
])
def test_random_fp8_weight(scheme, shape):
    act = 0.02 if scheme == "per_tensor" else None
    w = random_fp8_weight(300, 200, scheme, std=0.05, act_scale=act, seed=1, slot=2)
    assert w.data.dtype == FP8_DTYPE and tuple(w.scale.shape) == shape
    assert bool((w.scale > 0).all())
    rms = float(w.dequantize().square().mean().sqrt())
    assert rms == pytest.approx(0.05, rel=0.1)
    assert (w.act_scale is not None) == (act is not None)
    again = random_fp8_weight(300, 200, scheme, std=0.05, act_scale=act, seed=1, slot=2)
    other = random_fp8_weight(300, 200, scheme, std=0.05, act_scale=act, seed=1, slot=3)
    assert torch.equal(w.dequantize(), again.dequantize())
    assert not torch.equal(w.dequantize(), other.dequantize())


def test_plan_mix():
    through = plan_mix([256], 256)
    assert through.passthrough and through.gain == 1.0
    x = torch.arange(8.0).reshape(1, 8)
    assert through([x]) is x
    gdn = plan_mix([320, 192], 192)  # first 192 of qkv + z
    assert gdn.a == (0, 0) and gdn.b == (1, 0) and gdn.gain == pytest.approx(math.sqrt(2))
    attn = plan_mix([384, 96, 96], 192)  # query + gate: the two halves of q_proj
    assert attn.a == (0, 0) and attn.b == (0, 192) and attn.gain == pytest.approx(math.sqrt(2))
    llama = plan_mix([64, 16, 16], 64)  # the same slice twice
    assert llama.gain == pytest.approx(2.0)
    y = plan_mix([8, 4], 4)([x, torch.ones(1, 4)])
    assert torch.equal(y, x[:, :4] + 1)
    with pytest.raises(ValueError, match=r"width 512.*\[320, 192\]"):
        plan_mix([320, 192], 512)


def test_op_calls_follow_ops():
    tower = build_tower(SPEC, arm="merged")
    calls = tower.op_calls()
    assert [label for label, _ in calls] == [op.label for op in tower.ops()]
    for _, fn in calls:
        fn()


def test_time_tower_on_the_cpu():
    tower = build_tower(SPEC)
    t = time_tower(tower, replays=2, steps=2, warmup=1)
    assert t.method == "cpu-eager" and t.ms_per_step > 0 and "CPU" in t.note
    assert t.min_ms <= t.ms_per_step <= t.max_ms
    assert tower.warm


def test_cuda_only_paths_fail_clearly_on_the_cpu():
    tower = build_tower(SPEC)
    with pytest.raises(RuntimeError, match="CUDA graphs need a CUDA device"):
        tower.capture()
    with pytest.raises(RuntimeError, match="no captured graph"):
        tower.replay()


def test_a_warm_up_under_another_stand_in_kernel_is_stale():
    """A tower warmed (and captured) under one stand-in kernel and run under another ran the
    old warm state and graph: other kernels, and with rows_fp8 other dispatch keys, which that
    warm-up never resolved. Not warm then, and the graph dropped."""
    from fp8tower.tower.build import standin_kernel

    tower = build_tower(SPEC, arm="merged")
    tower.warmup(1)
    tower._graph = graph = object()  # as a capture leaves it (CUDA only)
    assert tower.warm and tower._graph is graph
    with standin_kernel("rows_fp8"):
        assert not tower.warm and tower._graph is None
        with pytest.raises(RuntimeError, match="no captured graph"):
            tower.replay()
    assert not tower.warm  # the warm-up's state went with the graph
    tower.warmup(1)
    tower._graph = graph
    with standin_kernel("rows"), pytest.raises(RuntimeError, match="another stand-in kernel"):
        tower.replay()


def test_reconfigure_and_unservable():
    tower = build_tower(SPEC, arm="merged")
    tower.warmup(1)
    tower.reconfigure(backend="cublaslt", m=4)
    assert not tower.warm and tower.static_x.shape == (4, SPEC.hidden_size)
    assert all(m.backend == "cublaslt" for m in tower.modules())
    assert "backend cublaslt cannot serve layers.0.gdn_in" in tower.unservable()
    tower.reconfigure(backend="auto")
    assert tower.unservable() is None


def test_build_errors():
    with pytest.raises(ValueError, match="unknown arm 'fused': expected one of unmerged, merged"):
        build_tower(SPEC, arm="fused")
    with pytest.raises(BackendError, match="unknown backend 'nonesuch'.*reference"):
        build_tower(SPEC, backend="nonesuch")
    with pytest.raises(ValueError, match="unknown scheme"):
        build_tower(SPEC, scheme="fp4")
    with pytest.raises(ValueError, match="m must be >= 1"):
        build_tower(SPEC, m=0)


def test_unmerged_modules_are_fp8_linears():
    tower = build_tower("tiny-hybrid")
    assert all(type(m) is Fp8Linear for m in tower.modules())


def test_capture_arm_on_the_cpu(tmp_path):
    from fp8tower.tower.capture import capture_arm
    from fp8tower.trace import attribute, load_arm

    result = capture_arm("tiny-hybrid", "merged", "auto", 1, (2, 4), tmp_path, device="cpu")
    manifest = result.manifest
    assert manifest.arm == "merged" and manifest.model == "tiny-hybrid" and manifest.m == 1
    assert manifest.device == "cpu" and manifest.steps == (2, 4)
    tower = build_tower(SPEC, arm="merged")
    assert [op.label for op in manifest.ops] == [op.label for op in tower.ops()]
    assert all(op.kernels >= 1 for op in manifest.ops)
    att = attribute(load_arm(tmp_path))
    assert att.integral and not att.mismatches


@pytest.mark.gpu
# block128 unmerged: tiny-hybrid's GDN shards (N = 320, 192) have no exact block128 merge
@pytest.mark.parametrize("scheme,m,arm", [("channel_token", 8, "merged"),
                                          ("block128", 1, "unmerged")])
def test_capture_arm_counts_the_graphs_kernels(tmp_path, scheme, m, arm):
    """A pre-pass + GEMM pair (the Triton default here) runs as one launch in an eager call
    (nn/plan.py's eager twin) but as two in the graph: the manifest must count the graph's,
    or the capture cannot be attributed (H200 2026-12-01, channel_token M = 1 of the 27B)."""
    from fp8tower.tower.capture import capture_arm
    from fp8tower.trace import attribute, load_arm

    result = capture_arm("tiny-hybrid", arm, "triton", m, (2, 4), tmp_path, scheme=scheme)
    gemms = [op for op in result.manifest.ops if not op.label.startswith("standin.")]
    assert gemms and all(op.kernels == 2 for op in gemms), [op.kernels for op in gemms]
    att = attribute(load_arm(tmp_path))
    assert att.integral and not att.mismatches


@pytest.mark.gpu
def test_capture_arm_with_the_rows_standin_attributes(tmp_path):
    """standin="rows": each stand-in is one Triton kernel that the trace maps to its op
    (build.STANDIN_REGEX), and the capture is attributed as with torch's."""
    from fp8tower.tower.capture import capture_arm
    from fp8tower.trace import attribute, load_arm

    result = capture_arm("tiny-hybrid", "merged", "triton", 3, (2, 4), tmp_path, standin="rows")
    standins = [op for op in result.manifest.ops if op.label.startswith("standin.")]
    assert standins and all(op.kernels == 1 and op.backend == "triton" for op in standins)
    assert result.manifest.meta["standin"] == "rows"
    att = attribute(load_arm(tmp_path))
    assert att.integral and not att.mismatches


def test_auto_warmup_pretunes_the_step_together(monkeypatch):
    """With `auto` and tuning allowed, warm-up tunes every untuned shape of the step in one
    dispatch.pretune (parallel builds, seeded buckets) before the first step."""
    from test_tuning import FakeClock, FakeTimer, fake_backend

    from fp8tower import dispatch

    clock = FakeClock()
    fakes = [fake_backend("fast", clock, {"default": 5.0, "f1": 4.0})]
    d = dispatch.Dispatcher(candidates=fakes, timer=FakeTimer(clock), tune=True, persist=False)
    from fp8tower.tuning import tuner

    calls = []
    real = tuner.pretune
    monkeypatch.setattr(tuner, "pretune",
                        lambda d, ps, **kw: calls.append(len(ps)) or real(d, ps, **kw))
    monkeypatch.setattr(dispatch, "_default", d)
    tower = build_tower(SPEC, scheme=Scheme.PER_TENSOR, m=1, backend="auto")
    tower.warmup()
    keys = {tower.problem(g).key() for g in tower._gemms()}
    assert calls and calls[0] == len(tower._gemms())
    assert d.stats["tuned"] == len(keys)  # each distinct shape once, all before the step


@pytest.mark.parametrize("arm", ("unmerged", "merged"))
def test_the_rows_standin_gives_the_torch_standins_bits(interpret, monkeypatch, arm):
    """build.STANDIN_KERNEL = "rows" (tower/standin.py, a benchmark arm): one Triton kernel
    reading each row at its stride instead of torch.add on the column slices; the same step,
    bit for bit, at M = 3 (strided slices); an unknown kernel is refused by name."""
    from fp8tower.tower import build

    tower = build_tower(SPEC, arm=arm, m=3, seed=5)
    assert any(not s.mix.passthrough for s in tower.stages)
    y_torch = tower.step(tower.static_x)
    monkeypatch.setattr(build, "STANDIN_KERNEL", "rows")
    y_rows = tower.step(tower.static_x)
    assert torch.equal(y_torch, y_rows)
    monkeypatch.setattr(build, "STANDIN_KERNEL", "fused")
    with pytest.raises(ValueError, match="'fused'"):
        tower.step(tower.static_x)


def test_standin_kernel_sets_and_restores_the_knob():
    from fp8tower.tower import build

    assert build.STANDIN_KERNEL == "torch"
    with build.standin_kernel("rows"):
        assert build.STANDIN_KERNEL == "rows"
        tower = build_tower(SPEC, arm="merged")
        assert {op.backend for op in tower.ops() if op.kind == "standin"} == {"triton"}
    assert build.STANDIN_KERNEL == "torch"
    assert {op.backend for op in tower.ops() if op.kind == "standin"} == {"torch"}
    with pytest.raises(ValueError, match="unknown stand-in kernel 'fused'"), \
            build.standin_kernel("fused"):
        pass
    with pytest.raises(RuntimeError), build.standin_kernel("rows"):
        raise RuntimeError
    assert build.STANDIN_KERNEL == "torch"


def test_capture_arm_records_the_standin_kernel(tmp_path):
    from fp8tower.tower.capture import capture_arm

    result = capture_arm("tiny-hybrid", "merged", "auto", 1, (2, 4), tmp_path, device="cpu")
    assert result.manifest.meta["standin"] == "torch"
    with pytest.raises(ValueError, match="'fused'"):
        capture_arm("tiny-hybrid", "merged", "auto", 1, (2, 4), tmp_path / "b", device="cpu",
                    standin="fused")


def test_rows_add_on_cpu_tensors_needs_the_interpreter(monkeypatch):
    pytest.importorskip("triton")
    from fp8tower.tower.standin import rows_add

    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    a = torch.randn(2, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="runs on CUDA tensors .* got cpu ones"):
        rows_add(a, a)


def test_rows_add_refuses_what_it_cannot_read(interpret):
    from fp8tower.tower.standin import rows_add

    a = torch.randn(4, 8, dtype=torch.bfloat16)
    with pytest.raises(ValueError, match="contiguous rows"):
        rows_add(a.t(), a.t())
    with pytest.raises(ValueError, match=r"\(4, 8\)"):
        rows_add(a, a[:, :4])


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf
@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # 60000 + 60000
@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16))
def test_rows_add_is_torch_add_bit_for_bit(interpret, dtype):
    """Column slices (row stride > K), ties to even, overflow to inf, inf - inf and NaN (a
    NaN's payload may differ: NaN where torch gives NaN)."""
    from fp8tower.tower.standin import rows_add

    g = torch.Generator().manual_seed(3)
    big = torch.randn(5, 3000, generator=g).to(dtype)
    big[0, :4] = torch.tensor([float("inf"), float("nan"), 60000.0, -1.0])
    big[0, 1900:1904] = torch.tensor([float("-inf"), 1.0, 60000.0, 1.0])
    a, b = big[:, :1100], big[:, 1900:]
    y, ref = rows_add(a, b), torch.add(a, b)
    assert y.is_contiguous() and y.shape == ref.shape
    nan = ref.isnan()
    assert int(nan.sum()) == 2 and torch.equal(y.isnan(), nan)
    assert torch.equal(y.view(torch.int16)[~nan], ref.view(torch.int16)[~nan])


def test_percent_of_ceiling_only_for_steps_beyond_3x_l2(monkeypatch):
    """A step of 3x the L2 or less may be read from L2 in part across replays (DESIGN.md's
    cold-L2 bound): no share of the HBM read ceiling is claimed for it."""
    from types import SimpleNamespace

    from fp8tower.tower import bench

    monkeypatch.setattr(torch.cuda, "get_device_properties",
                        lambda dev: SimpleNamespace(L2_cache_size=60_000_000))
    cuda = torch.device("cuda", 0)
    assert bench._fits_in_l2(150_000_000, cuda)  # 2.5x the L2: was counted as cold
    assert not bench._fits_in_l2(181_000_000, cuda)
    assert not bench._fits_in_l2(1000, torch.device("cpu"))


def test_bench_tower_alternates_cells_round_by_round(monkeypatch):
    """Before: every cell of the unmerged arm was timed before any of the merged arm, once,
    with auto's tuning in between, so a drift of the machine read as a speedup. Now every cell
    is warmed (tuned) first, then timed once a round, the order reversed every other round,
    and a row is the median of its rounds."""
    from fp8tower.tower import bench
    from fp8tower.tower.timing import TowerTiming

    order, warm, clock = [], [], iter(range(1, 1000))

    def fake_time(tower, replays, steps):
        order.append((tower.arm, tower.m))
        return TowerTiming(float(next(clock)), 0.0, 1e9, replays, steps, "cpu-eager")

    real_warmup = bench.Tower.warmup

    def spy_warmup(self, *a, **k):
        warm.append(len(order))
        return real_warmup(self, *a, **k)

    monkeypatch.setattr(bench, "time_tower", fake_time)
    monkeypatch.setattr(bench.Tower, "warmup", spy_warmup)
    rows = bench.bench_tower("tiny-hybrid", arms=("unmerged", "merged"),
                             backend_names=("reference",), ms=(1, 8), rounds=3,
                             replays=1, steps=1)
    cells = [("unmerged", 1), ("unmerged", 8), ("merged", 1), ("merged", 8)]
    assert order == cells + cells[::-1] + cells
    assert warm[:4] == [0, 0, 0, 0]  # every cell warmed before the first timing
    by = {(r.arm, r.m): r for r in rows}
    assert by[("unmerged", 1)].round_ms == [1.0, 8.0, 9.0]
    assert by[("unmerged", 1)].ms_per_step == 8.0 and by[("merged", 8)].ms_per_step == 5.0
    with pytest.raises(ValueError, match="rounds"):
        bench.bench_tower("tiny-hybrid", rounds=0)


@pytest.mark.parametrize("m", (1, 3))
def test_rows_add_fp8_is_the_sum_then_the_prepass_bit_for_bit(interpret, m):
    """standin.rows_add_fp8 (--standin rows_fp8): the bf16 sum quantized with a static scale
    in the same kernel; the same bits as rows_add then act_quant's per-tensor pre-pass, on
    column slices (row stride > K), saturating values and a NaN included (the reference is
    the pre-pass kernel the GPU runs: the interpreter's own fp32 -> fp8 cast is not torch's,
    and gives a NaN a finite code)."""
    from fp8tower.kernels.act_quant import quantize
    from fp8tower.tower.standin import rows_add, rows_add_fp8

    g = torch.Generator().manual_seed(4)
    big = (torch.randn(m, 3000, generator=g) * 3).to(torch.bfloat16)
    big[0, :3] = torch.tensor([1e4, -1e4, float("nan")])
    a, b = big[:, :1100], big[:, 1900:]
    scale = torch.tensor([0.0123], dtype=torch.float32)
    q = rows_add_fp8(a, b, scale)
    ref, _ = quantize(rows_add(a, b), Scheme.PER_TENSOR, scale)
    assert q.dtype == FP8_DTYPE and q.is_contiguous() and q.shape == (m, 1100)
    assert torch.equal(q.view(torch.uint8), ref.view(torch.uint8))  # NaN: the same code
    assert q[0, :2].float().tolist() == [448, -448]  # saturated, not inf
    with pytest.raises(ValueError, match="one-element float32 tensor"):
        rows_add_fp8(a, b, 0.0123)
    with pytest.raises(ValueError, match="bf16 operands"):
        rows_add_fp8(a.half(), b.half(), scale)


@pytest.mark.parametrize("arm", ("unmerged", "merged"))
def test_the_rows_fp8_standin_gives_the_same_step(interpret, monkeypatch, arm):
    """build.STANDIN_KERNEL = "rows_fp8": each stand-in that feeds GEMMs quantizes for them
    (per_tensor's static scale, one a stage), and they read FP8 x: the step's bits equal the
    rows stand-in's, whose GEMMs quantize the same bf16 sums with the same scale (Triton
    backend, interpreter, M = 3). Their dispatch keys say FP8 x; the final mix stays bf16."""
    from fp8tower.tower import build

    tower = build_tower(SPEC, arm=arm, m=3, seed=6, backend="triton")
    monkeypatch.setattr(build, "STANDIN_KERNEL", "rows")
    y_rows = tower.step(tower.static_x)
    keys_rows = [p.key() for p in tower.gemm_problems()]
    monkeypatch.setattr(build, "STANDIN_KERNEL", "rows_fp8")
    y_fp8 = tower.step(tower.static_x)
    assert torch.equal(y_rows, y_fp8)
    fed = [s.fp8_input for s in tower.stages for _ in s.gemms]
    assert any(fed) and not all(fed)
    problems = tower.gemm_problems()
    assert [p.act_dtype == FP8_DTYPE for p in problems] == fed
    assert [p.key() for p, f in zip(problems, fed) if not f] == [
        k for k, f in zip(keys_rows, fed) if not f]
    standins = [op for op in tower.ops() if op.kind == "standin"]
    assert {op.backend for op in standins} == {"triton"}
    feeding = standins[:-1] if not tower.final.passthrough else standins
    assert feeding and all(op.bytes_moved == (2 * 2 + 1) * 3 * op.k for op in feeding)
    if not tower.final.passthrough:  # the final mix: no consumer, bf16 out
        assert standins[-1].bytes_moved == 3 * 2 * 3 * standins[-1].k


def test_the_rows_fp8_standin_needs_per_tensor(interpret, monkeypatch):
    from fp8tower.tower import build

    tower = build_tower(SPEC, scheme=Scheme.CHANNEL_TOKEN, m=1, backend="triton")
    monkeypatch.setattr(build, "STANDIN_KERNEL", "rows_fp8")
    with pytest.raises(ValueError, match="only per_tensor towers"):
        tower.step(tower.static_x)
