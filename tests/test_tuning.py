"""Tuning: rotation, selection and pruning with a fake timer, evidence, the cache file."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import multiprocessing
import warnings
from pathlib import Path

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from fp8tower.backends import Backend
from fp8tower.problem import GemmProblem
from fp8tower.tuning import cache as tcache
from fp8tower.tuning import ceiling as tceiling
from fp8tower.tuning import search as tsearch
from fp8tower.tuning import timer as ttimer
from fp8tower.tuning.cache import DecisionCache, Entry, EntryError, Measurement
from fp8tower.tuning.timer import Timing

# ----------------------------------------------------------------------------- fakes


class FakeClock:
    """Fake backends advance it by their configured time; FakeTimer reads it."""

    def __init__(self) -> None:
        self.now = 0.0
        self.ran: list[tuple[str, str]] = []  # (backend, config id) per call


class FakeTimer:
    def __init__(self, clock: FakeClock) -> None:
        self.clock = clock
        self.calls = 0

    def __call__(self, make_call, n_copies: int) -> Timing:
        self.calls += 1
        start = self.clock.now
        make_call(n_copies - 1)()
        t = self.clock.now - start
        return Timing(median_us=t, min_us=t * 0.9, max_us=t * 1.1)


def cfg_id(config) -> str:
    return "default" if config is None else config["id"]


def fake_backend(
    name: str,
    clock: FakeClock,
    times: dict[str, float],
    *,
    fail: tuple[str, ...] = (),
    raise_type: type[BaseException] = torch.cuda.OutOfMemoryError,
    reason: str | None = None,
) -> Backend:
    """A backend whose config 'default' (None) and configs {'id': ...} take ``times`` us."""

    def run(x, weight, packed, *, act_scale, bias, out_dtype, config):
        cid = cfg_id(config)
        clock.ran.append((name, cid))
        if cid in fail:
            raise raise_type(f"{name}/{cid} failed (fake)")
        clock.now += times[cid]
        return torch.zeros(x.shape[0], weight.n, dtype=out_dtype)

    return Backend(
        name=name,
        kernel_family=name,
        description="fake",
        unavailable_reason=lambda: None,
        check=lambda problem: reason,
        prepare=lambda weight: {"prepared": True},
        run=run,
        configs=lambda problem: [{"id": c, "block": 64} for c in times if c != "default"],
        default_config=lambda problem: None,
    )


def cpu_problem(m=3, n=48, k=32, scheme="channel_token") -> GemmProblem:
    return GemmProblem(m=m, n=n, k=k, scheme=scheme)


def entry_with(times: dict[str, float], problem: GemmProblem | None = None) -> Entry:
    """A valid entry whose candidates are the given 'backend' -> time (default configs)."""
    problem = problem or cpu_problem(m=4)
    cands = [Measurement(b, None, t, t, 0.0, problem.bytes_moved() / t / 1e3)
             for b, t in times.items()]
    w = min(cands, key=lambda c: c.median_us)
    return Entry(problem, w.backend, w.config, tsearch.now_iso(), cands)


# ----------------------------------------------------------------------------- timing


def test_rotation_copies_exceed_three_l2():
    l2 = 60 * 2**20
    assert ttimer.rotation_copies(50 * 2**20, l2) == 4  # 200 MiB > 180 MiB, 150 MiB is not
    assert ttimer.rotation_copies(5120 * 1024, l2) == 37
    assert ttimer.rotation_copies(400 * 2**20, l2) == 1  # one copy alone exceeds 3x L2
    assert ttimer.rotation_copies(256, l2) == ttimer.MAX_COPIES
    assert ttimer.rotation_copies(1000, 0) == 1  # CPU: no L2 to defeat
    with pytest.raises(ValueError):
        ttimer.rotation_copies(0, l2)


@given(st.integers(1, 10**9), st.integers(1, 10**8))
def test_rotation_copies_property(nbytes, l2):
    n = ttimer.rotation_copies(nbytes, l2)
    assert 1 <= n <= ttimer.MAX_COPIES
    if n < ttimer.MAX_COPIES:
        assert n * nbytes > 3 * l2  # enough copies ...
        assert n == 1 or (n - 1) * nbytes <= 3 * l2  # ... and not one more than needed


def test_timing_spread():
    assert Timing(10.0, 9.0, 12.0).spread == pytest.approx(0.3)


def test_time_cuda_graph_needs_cuda():
    if torch.cuda.is_available():
        pytest.skip("CPU-only check")
    with pytest.raises(RuntimeError, match="CUDA"):
        ttimer.time_cuda_graph(lambda i: (lambda: None), 1)


def test_gpu_errors_are_gpu_errors_only():
    errs = tsearch.gpu_errors()
    assert torch.cuda.OutOfMemoryError in errs
    assert not any(issubclass(e, (TypeError, KeyError, AttributeError)) or e is RuntimeError
                   for e in errs)
    pytest.importorskip("triton")
    from triton.compiler.errors import CompilationError
    from triton.runtime.errors import OutOfResources

    assert CompilationError in errs and OutOfResources in errs


# ----------------------------------------------------------------------------- selection


def test_tuning_selects_fastest_and_prunes():
    clock = FakeClock()
    a = fake_backend("a", clock, {"default": 10.0, "a1": 8.0, "a2": 12.0})
    b = fake_backend("b", clock, {"default": 12.5, "b1": 9.0})  # within 1.3x: explored
    c = fake_backend("c", clock, {"default": 20.0, "c1": 1.0})  # beyond 1.3x: c1 never timed
    timer = FakeTimer(clock)
    e = tsearch.tune_problem(cpu_problem(m=3), [a, b, c], timer=timer)

    assert (e.backend, e.config) == ("a", {"block": 64, "id": "a1"})
    assert [m.label for m in e.ranked()] == [
        "a[block=64,id=a1]", "b[block=64,id=b1]", "a[default]", "a[block=64,id=a2]",
        "b[default]", "c[default]",
    ]
    assert [m.backend + "/" + cfg_id(m.config) for m in e.runners_up()] == ["b/b1", "a/default"]
    assert e.margin() == pytest.approx(9.0 / 8.0 - 1)
    assert e.margin_other_backend() == pytest.approx(9.0 / 8.0 - 1)
    assert e.pruned == {"c": 1}
    assert ("c", "c1") not in clock.ran
    assert timer.calls == 6
    # Tuned at the bucket: M=3 -> 4; GB/s from the problem's bytes (decimal).
    assert e.problem.m == 4 and e.key == cpu_problem(m=4).key()
    w = e.winner
    assert w.gbps == pytest.approx(e.problem.bytes_moved() / 8.0 / 1e3)
    assert w.spread == pytest.approx(0.2 * 8.0 / 8.0)


def test_tuning_caps_configs_evenly_and_times_defaults_first():
    clock = FakeClock()
    times = {"default": 5.0, **{f"x{i}": 6.0 + i for i in range(5)}}
    x = fake_backend("x", clock, times)
    e = tsearch.tune_problem(cpu_problem(), [x], timer=FakeTimer(clock), max_configs=2)
    assert clock.ran == [("x", "default"), ("x", "x0"), ("x", "x2")]
    assert e.pruned == {"x": 3}
    assert e.backend == "x" and e.config is None
    assert e.margin() == pytest.approx(6.0 / 5.0 - 1)
    assert e.margin_other_backend() is None


def test_priority_configs_are_timed_before_the_spaced_sample():
    clock = FakeClock()
    times = {"default": 5.0, **{f"x{i}": 6.0 + i for i in range(5)}}
    x = dataclasses.replace(fake_backend("x", clock, times),
                            priority_configs=lambda p: [{"id": "x3", "block": 64}])
    e = tsearch.tune_problem(cpu_problem(), [x], timer=FakeTimer(clock), max_configs=2)
    # x3 first, then 2 evenly spaced over the other four (x0, x1, x2, x4): x0 and x2.
    assert clock.ran == [("x", "default"), ("x", "x3"), ("x", "x0"), ("x", "x2")]
    assert e.pruned == {"x": 2}


@pytest.mark.parametrize("tm_us,winner", [(7.0, "a1_tm"), (9.0, "a1")])
def test_the_winner_is_timed_over_its_other_weight_layouts(tm_us, winner):
    """Step (3): the winner's layout variants (not in configs) are timed after the search,
    win when faster, and dispatch finds them again (native_config)."""
    clock = FakeClock()
    a = fake_backend("a", clock, {"default": 10.0, "a1": 8.0, "a2": 12.0, "a1_tm": tm_us})

    def variants(problem, cfg):
        return [{**cfg, "id": cfg["id"] + "_tm"}] if cfg and not cfg["id"].endswith("_tm") else []

    a = dataclasses.replace(a, configs=lambda p: [{"id": c, "block": 64} for c in ("a1", "a2")],
                            layout_variants=variants)
    e = tsearch.tune_problem(cpu_problem(), [a], timer=FakeTimer(clock))
    assert clock.ran == [("a", "default"), ("a", "a1"), ("a", "a2"), ("a", "a1_tm")]
    assert cfg_id(e.config) == winner
    assert tsearch.native_config(a, e.problem, e.config) == (True, e.config)
    assert tsearch.native_config(a, e.problem, {"id": "a2_tm", "block": 64})[0]
    assert not tsearch.native_config(a, e.problem, {"id": "zz", "block": 64})[0]


@pytest.mark.parametrize("deep_us,winner", [(7.0, "a1_deep"), (9.0, "a1")])
def test_the_winner_is_timed_with_its_refinements_then_its_layouts(deep_us, winner):
    """Step (3): the winner's refinements (not in configs) are timed once, win when faster,
    and step (4) then times the layouts of the winner so far; dispatch finds a refined
    winner and its layout variant again (native_config)."""
    clock = FakeClock()
    a = fake_backend("a", clock, {"default": 10.0, "a1": 8.0, "a1_deep": deep_us,
                                  "a1_tm": 20.0, "a1_deep_tm": 20.0})

    def refine(problem, cfg):
        return [{**cfg, "id": cfg["id"] + "_deep"}] if cfg and "_" not in cfg["id"] else []

    def variants(problem, cfg):
        return [{**cfg, "id": cfg["id"] + "_tm"}] if cfg and not cfg["id"].endswith("_tm") else []

    a = dataclasses.replace(a, configs=lambda p: [{"id": "a1", "block": 64}],
                            refinements=refine, layout_variants=variants)
    e = tsearch.tune_problem(cpu_problem(), [a], timer=FakeTimer(clock))
    assert clock.ran == [("a", "default"), ("a", "a1"), ("a", "a1_deep"), ("a", f"{winner}_tm")]
    assert cfg_id(e.config) == winner
    assert tsearch.native_config(a, e.problem, e.config) == (True, e.config)
    assert tsearch.native_config(a, e.problem, {"id": "a1_deep_tm", "block": 64})[0]


@pytest.mark.parametrize("b1_us,refined", [(11.0, True), (12.5, False)])
def test_another_backends_best_near_the_winner_is_refined_too(b1_us, refined):
    """Step (3) also times the refinements of each other backend's fastest candidate within
    REFINE_RATIO of the fastest (a library winning by a hair hid Triton's twin: session 59),
    and a refined runner-up wins when faster; beyond the ratio it is not refined."""
    clock = FakeClock()
    lib = fake_backend("lib", clock, {"default": 10.0})
    b = fake_backend("b", clock, {"default": 30.0, "b1": b1_us, "b1_deep": 9.0})

    def refine(problem, cfg):
        return [{**cfg, "id": cfg["id"] + "_deep"}] if cfg and "_" not in cfg["id"] else []

    lib = dataclasses.replace(lib, configs=lambda p: [])
    b = dataclasses.replace(b, configs=lambda p: [{"id": "b1", "block": 64}], refinements=refine)
    assert 11.0 / 10.0 <= tsearch.REFINE_RATIO < 12.5 / 10.0
    e = tsearch.tune_problem(cpu_problem(), [lib, b], timer=FakeTimer(clock),
                             prune_ratio=10.0)
    assert (("b", "b1_deep") in clock.ran) is refined
    assert (e.backend, cfg_id(e.config)) == (("b", "b1_deep") if refined else ("lib", "default"))


def test_tile_major_off_times_no_variant_with_a_second_weight_copy(monkeypatch):
    monkeypatch.setenv("FP8TOWER_TILE_MAJOR", "0")
    clock = FakeClock()
    a = fake_backend("a", clock, {"default": 10.0, "a1": 8.0, "a1_tm": 7.0})
    a = dataclasses.replace(a, configs=lambda p: [{"id": "a1", "block": 64}],
                            layout_variants=lambda p, c: [{**c, "id": "a1_tm", "packed": True}] if c else [])
    e = tsearch.tune_problem(cpu_problem(), [a], timer=FakeTimer(clock))
    assert ("a", "a1_tm") not in clock.ran and cfg_id(e.config) == "a1"


def test_x_writer_writes_x_with_its_own_values():
    x = torch.randn(3, 64).bfloat16()
    before = x.clone()
    w = tsearch.x_writer(x)
    x.zero_()  # what the writer restores: the values it was built from
    w()
    assert torch.equal(x, before)
    q = torch.randn(2, 32).to(torch.float8_e4m3fn)  # FP8 x is left alone (a bf16 buffer instead)
    q0 = q.view(torch.uint8).clone()
    tsearch.x_writer(q)()
    assert torch.equal(q.view(torch.uint8), q0)


def test_the_timed_chain_writes_x_before_every_other_gemm():
    clock = FakeClock()
    be = fake_backend("a", clock, {"default": 1.0})
    p = cpu_problem()
    x, act, ws = tsearch.tuning_operands(p, torch.device("cpu"), 3)
    writes = []
    make = tsearch._make_call(be, None, x, act, ws, torch.bfloat16,
                              write_x=lambda: writes.append(len(clock.ran)))
    for j in range(6):  # round-robin over 3 copies, as the timer captures them
        make(j % 3)()
    assert len(clock.ran) == 6
    assert writes == [1, 3, 5]  # before the 2nd, 4th and 6th GEMM: every other one


def test_the_chain_subtracts_the_writers_share():
    clock = FakeClock()
    be = fake_backend("a", clock, {"default": 10.0})
    x, act, ws = tsearch.tuning_operands(cpu_problem(), torch.device("cpu"), 4)

    def timer(make, n):  # every copy once, as one graph replay; the time per call
        start = clock.now
        for i in range(n):
            make(i)()
        t = (clock.now - start) / n
        return Timing(median_us=t, min_us=t, max_us=t)

    def write_x():
        clock.now += 4.0

    chain = tsearch.Chain(x, act, ws, torch.bfloat16, timer, write_x, base_us=2.0)
    # 4 GEMMs of 10 us and 2 writes of 4 us (before the 2nd and the 4th), less 2 us a call
    assert chain.time(be, None).median_us == pytest.approx(10.0)
    alone = tsearch.Chain.build(x, act, ws, torch.bfloat16, timer=timer, writer=False)
    assert alone.write_x is None and alone.base_us == 0.0
    assert alone.time(be, None).median_us == pytest.approx(10.0)
    assert tsearch.Chain.build(x, act, ws, torch.bfloat16, timer=timer).write_x is None  # CPU
    forced = tsearch.Chain.build(x, act, ws, torch.bfloat16, timer=timer, writer=True)
    assert forced.write_x is not None and forced.base_us == 0.0  # torch's mul: no fake time


def test_spaced():
    assert tsearch.spaced(list(range(5)), 8) == [0, 1, 2, 3, 4]
    assert tsearch.spaced(list(range(312)), 4) == [0, 78, 156, 234]
    assert tsearch.spaced(list(range(10)), 0) == []


def test_tuning_records_gpu_failures_and_explores_failed_defaults():
    clock = FakeClock()
    a = fake_backend("a", clock, {"default": 10.0})
    d = fake_backend("d", clock, {"default": 0.0, "d1": 7.0, "d2": 0.0}, fail=("default", "d2"))
    e = tsearch.tune_problem(cpu_problem(), [a, d], timer=FakeTimer(clock))
    assert e.backend == "d" and e.config == {"block": 64, "id": "d1"}
    failed = {cfg_id(m.config): m.error for m in e.failures()}
    assert set(failed) == {"default", "d2"}
    assert failed["default"].startswith("OutOfMemoryError: d/default failed")


def test_tuning_catches_triton_resource_errors():
    pytest.importorskip("triton")
    from triton.runtime.errors import OutOfResources

    class Oor(OutOfResources):
        def __init__(self, msg):
            super().__init__(232448, 101376, "shared memory")

    clock = FakeClock()
    a = fake_backend("a", clock, {"default": 3.0}, fail=("default",), raise_type=Oor)
    e = tsearch.tune_problem(cpu_problem(), [a], timer=FakeTimer(clock))
    assert not e.ranked() and "shared memory" in e.failures()[0].error


def test_tuning_propagates_programming_errors():
    clock = FakeClock()
    bad = fake_backend("bad", clock, {"default": 1.0}, fail=("default",), raise_type=TypeError)
    with pytest.raises(TypeError, match="bad/default"):
        tsearch.tune_problem(cpu_problem(), [bad], timer=FakeTimer(clock))


def test_tuning_operands_follow_the_problem():
    for scheme, shape in [("per_tensor", ()), ("channel_token", (48,)), ("block128", (1, 1)),
                          ("weight_only", (48,))]:
        p = GemmProblem(m=2, n=48, k=32, scheme=scheme, act_dtype=torch.float16)
        x, act_scale, ws = tsearch.tuning_operands(p, torch.device("cpu"), 3)
        assert x.shape == (2, 32) and x.dtype == torch.float16 and act_scale is None
        assert len(ws) == 3 and len({w.data.data_ptr() for w in ws}) == 3
        assert all(tuple(w.scale.shape) == shape and bool((w.scale > 0).all()) for w in ws)
        assert bool(torch.isfinite(ws[0].data.float()).all())
    p = GemmProblem(m=2, n=48, k=32, scheme="per_tensor", channel_weight_scale=True)
    assert tuple(tsearch.tuning_operands(p, torch.device("cpu"), 1)[2][0].scale.shape) == (48,)


# ----------------------------------------------------------------------------- entries


def test_entry_json_round_trip():
    clock = FakeClock()
    a = fake_backend("a", clock, {"default": 10.0, "a1": 8.0})
    d = fake_backend("d", clock, {"default": 1.0}, fail=("default",))
    e = tsearch.tune_problem(cpu_problem(), [a, d], timer=FakeTimer(clock), read_ceiling_gbps=4000.0)
    raw = json.loads(json.dumps(e.to_json()))
    back = Entry.from_json(e.key, raw)
    assert back == e


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda r: r.update(backend="b"), "not the fastest"),
        (lambda r: r.update(config=5), "config must be"),
        (lambda r: r["candidates"][0].update(median_us=-1.0), "median_us must be a finite number >= 0"),
        (lambda r: r["candidates"][0].update(median_us="fast"), "median_us"),
        (lambda r: r["problem"].update(n=64), "key"),
        (lambda r: r["problem"].update(act_dtype="float99"), "dtype"),
        (lambda r: r.pop("date"), "date"),
        (lambda r: r.update(candidates=[]), "no candidate"),
        (lambda r: r.update(pruned={"a": -1}), "pruned"),
    ],
)
def test_entry_validation_rejects(mutate, match):
    e = entry_with({"a": 5.0, "b": 7.0})
    raw = json.loads(json.dumps(e.to_json()))
    mutate(raw)
    with pytest.raises(EntryError, match=match):
        Entry.from_json(e.key, raw)


# ----------------------------------------------------------------------------- cache


def meta(**over) -> dict:
    return {**tcache.environment_meta(None), **over}


def test_cache_file_name_and_dir(monkeypatch, tmp_path):
    assert tcache.cache_file_name("NVIDIA H200") == "nvidia-h200.json"
    # punctuation: a hash of the exact name, so names that slug alike keep their own files
    assert tcache.cache_file_name("NVIDIA GeForce RTX 4090 / (x)") == \
        f"nvidia-geforce-rtx-4090-x-{hashlib.sha256(b'NVIDIA GeForce RTX 4090 / (x)').hexdigest()[:8]}.json"
    monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path / "c"))
    assert tcache.default_cache_dir() == tmp_path / "c"
    monkeypatch.delenv("FP8TOWER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert tcache.default_cache_dir() == tmp_path / "fp8tower"


def test_readme_states_the_cache_dir_rule():
    """README said the default was ~/.cache/fp8tower; $XDG_CACHE_HOME comes first."""
    readme = " ".join((Path(__file__).resolve().parents[1] / "README.md").read_text().split())
    assert ("`FP8TOWER_CACHE_DIR` (tuning cache, default `$XDG_CACHE_HOME/fp8tower`, else "
            "`~/.cache/fp8tower`)") in readme


def test_cache_round_trip_and_merge(tmp_path):
    path = tmp_path / "cpu.json"
    e1 = entry_with({"a": 5.0, "b": 7.0}, cpu_problem(m=1))
    e2 = entry_with({"a": 9.0, "b": 7.0}, cpu_problem(m=2))
    DecisionCache(path, meta()).save({e1.key: e1})
    DecisionCache(path, meta()).save({e2.key: e2})  # merged, not replaced
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = DecisionCache(path, meta(), ["a", "b"]).load()
    assert loaded == {e1.key: e1, e2.key: e2}
    assert not list(tmp_path.glob("*.tmp"))  # atomic write left no temp file


def test_cache_version_mismatch_is_ignored_then_replaced(tmp_path):
    path = tmp_path / "cpu.json"
    e = entry_with({"a": 5.0})
    DecisionCache(path, meta(torch="1.0.0")).save({e.key: e})
    with pytest.warns(tcache.TuningCacheWarning, match=r"torch '1.0.0' != "):
        assert DecisionCache(path, meta()).load() == {}
    e2 = entry_with({"b": 3.0}, cpu_problem(m=8))
    with pytest.warns(tcache.TuningCacheWarning, match="replacing"):
        DecisionCache(path, meta()).save({e2.key: e2})
    doc = json.loads(path.read_text())
    assert doc["meta"]["torch"] == torch.__version__ and list(doc["entries"]) == [e2.key]


def test_cache_made_with_other_kernel_code_is_ignored(tmp_path, monkeypatch):
    """The kernel sources' hash is part of what a cache must match (provenance.kernel_code):
    timings of other kernels are not evidence for these; a file from before the hash (no
    'kernels' key) is ignored too."""
    from fp8tower import provenance

    code = provenance.kernel_code()
    assert len(code) == 16 and meta()["kernels"] == code
    path = tmp_path / "cpu.json"
    e = entry_with({"a": 5.0})
    DecisionCache(path, meta(kernels="0" * 16)).save({e.key: e})
    with pytest.warns(tcache.TuningCacheWarning, match=r"kernels '0{16}' != "):
        assert DecisionCache(path, meta()).load() == {}
    old = {k: v for k, v in meta().items() if k != "kernels"}
    DecisionCache(path, old).save({e.key: e})
    with pytest.warns(tcache.TuningCacheWarning, match=r"kernels None != "):
        assert DecisionCache(path, meta()).load() == {}
    # the hash covers the CUDA sources and the Triton kernels, and changes with them
    src = tmp_path / "fp8tower"
    for sub in ("kernels", "backends/csrc/stream"):
        (src / sub).mkdir(parents=True)
    (src / "kernels" / "k.py").write_text("a")
    (src / "backends" / "csrc" / "stream" / "s.cu").write_text("b")
    monkeypatch.setattr(provenance, "__file__", str(src / "provenance.py"))
    provenance.kernel_code.cache_clear()
    try:
        first = provenance.kernel_code()
        (src / "backends" / "csrc" / "stream" / "s.cu").write_text("c")
        provenance.kernel_code.cache_clear()
        assert provenance.kernel_code() != first
    finally:
        monkeypatch.undo()
        provenance.kernel_code.cache_clear()
    assert provenance.kernel_code() == code


@pytest.mark.parametrize("content", ["", '{"meta": {}, "entr', "[1, 2]", '{"meta": 3}', "\x00\xff"])
def test_cache_corrupt_file_warns_and_is_ignored(tmp_path, content):
    path = tmp_path / "cpu.json"
    path.write_bytes(content.encode("latin-1"))
    with pytest.warns(tcache.TuningCacheWarning, match="cpu.json"):
        assert DecisionCache(path, meta()).load() == {}


def test_cache_truncated_real_file(tmp_path):
    path = tmp_path / "cpu.json"
    e = entry_with({"a": 5.0, "b": 6.0})
    DecisionCache(path, meta()).save({e.key: e})
    text = path.read_text()
    path.write_text(text[: len(text) // 2])
    with pytest.warns(tcache.TuningCacheWarning, match=r"cpu\.json: corrupt or truncated"):
        assert DecisionCache(path, meta()).load() == {}


def test_cache_skips_bad_and_unknown_entries_keeps_the_rest(tmp_path):
    path = tmp_path / "cpu.json"
    good = entry_with({"a": 5.0}, cpu_problem(m=1))
    alien = entry_with({"zzz": 5.0}, cpu_problem(m=2))
    DecisionCache(path, meta()).save({good.key: good, alien.key: alien})
    doc = json.loads(path.read_text())
    doc["entries"]["m4_broken"] = {"backend": "a"}
    path.write_text(json.dumps(doc))
    with pytest.warns(tcache.TuningCacheWarning) as rec:
        loaded = DecisionCache(path, meta(), ["a"]).load()
    assert loaded == {good.key: good}
    text = " | ".join(str(w.message) for w in rec)
    assert "m4_broken skipped" in text and "'zzz', not registered" in text


def _writer(path: str, meta_: dict, first_m: int, count: int) -> None:
    cache = DecisionCache(path, meta_)
    for i in range(count):
        e = entry_with({"a": 1.0 + i}, GemmProblem(m=1, n=16 * (first_m + i), k=32,
                                                   scheme="per_tensor"))
        cache.save({e.key: e})


def test_cache_two_processes_lose_nothing(tmp_path):
    path = str(tmp_path / "cpu.json")
    ctx = multiprocessing.get_context("fork")
    count = 30
    procs = [ctx.Process(target=_writer, args=(path, meta(), start, count))
             for start in (1, 1001)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
        assert p.exitcode == 0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loaded = DecisionCache(path, meta()).load()
    ns = sorted(e.problem.n // 16 for e in loaded.values())
    assert ns == list(range(1, 1 + count)) + list(range(1001, 1001 + count))


# ----------------------------------------------------------------------------- explain


def test_explain_row():
    e = entry_with({"a": 8.0, "b": 10.0, "c": 12.0, "d": 20.0})
    e.read_ceiling_gbps = 4000.0
    row = tcache.explain_row(e)
    assert row["winner"]["backend"] == "a"
    assert [c["backend"] for c in row["runners_up"]] == ["b", "c"]
    assert row["margin"] == pytest.approx(0.25)
    assert row["winner"]["ceiling_fraction"] == pytest.approx(row["winner"]["gbps"] / 4000.0)
    json.dumps(row)


# ----------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_time_cuda_graph_on_gpu():
    a = torch.randn(4096, 4096, device="cuda")
    copies = [a.clone() for _ in range(4)]
    t = ttimer.time_cuda_graph(lambda i: (lambda: copies[i].sum()), 4)
    assert 0 < t.min_us <= t.median_us <= t.max_us and t.calls == 32 and t.copies == 4
    # 64 MiB of fp32 read cold: at 0.3-10 TB/s (decimal).
    gbps = a.numel() * 4 / t.median_us / 1e3
    assert 300 < gbps < 10_000


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_read_ceiling_on_gpu():
    per = tceiling.read_ceiling(nbytes=1_000_000_000)
    assert {"sum_fp32", "amax_bf16", "rowsum_fp32"} <= set(per)
    assert all(300 < v < 10_000 for v in per.values()), per


def test_problem_json_round_trip_keeps_every_key_field():
    """Every GemmProblem field survives the cache (a lost field re-keys the entry and the
    tuned choice is silently skipped: seen on the H200, 2026-11-29, static_act_scale)."""
    import dataclasses

    from fp8tower.problem import GemmProblem
    from fp8tower.tuning.cache import problem_from_json, problem_to_json

    p = GemmProblem(8, 1024, 5120, "per_tensor", capability=(9, 0),
                    channel_weight_scale=True, static_act_scale=True, has_bias=True)
    q = problem_from_json(problem_to_json(p))
    assert q == p and q.key() == p.key()
    assert set(problem_to_json(p)) == {f.name for f in dataclasses.fields(GemmProblem)}
    # has_bias is written only when set: entries without a bias keep their JSON and key
    plain = dataclasses.replace(p, has_bias=False)
    assert "has_bias" not in problem_to_json(plain)
    assert problem_from_json(problem_to_json(plain)) == plain


# ----------------------------------------------------------------------------- host ties


def test_a_host_tie_goes_to_the_backend_with_the_cheaper_eager_path():
    # cutlass 0.5% faster than triton (as 4096x4096 channel_token on the H200, 2026-12-01):
    # triton wins, for its ~20 us host call against cutlass's ~75 us.
    e = entry_with({"cutlass": 10.35, "triton": 10.40, "cudnn": 14.55})
    assert e.winner.backend == "triton"
    assert [c.backend for c in e.ties()] == ["cutlass", "triton"]
    assert e.margin() == pytest.approx(10.35 / 10.40 - 1)  # negative: the winner took a tie
    assert [c.backend for c in e.runners_up()] == ["cutlass", "cudnn"]


def test_a_tie_goes_to_the_config_without_a_second_weight_copy():
    p = cpu_problem(m=4)
    base = {"block_n": 64, "block_k": 256}

    def entry(tm_us):
        cands = [Measurement("triton", {**base, "packed": True}, tm_us, tm_us, 0.0, 1.0),
                 Measurement("triton", base, 10.0, 10.0, 0.0, 1.0)]
        return Entry(p, "triton", None, "2026-12-01T00:00:00+00:00", cands, {})

    assert entry(9.9).winner.config == base  # 1% faster: not worth the memory
    assert entry(9.7).winner.config == {**base, "packed": True}  # 3% faster: it wins


ROW = {"block_n": 64, "block_k": 256}
TILE = {**ROW, "packed": True}  # tile-major weights, tile 64x256


def layout_entry(m: int, tile_us: float, *, n: int = 48, tile=TILE, context=None) -> Entry:
    """An entry at M = ``m`` (its own bucket) timing ``tile`` against row-major ROW (10 us),
    served the tie rule's pick with nothing held."""
    p = cpu_problem(m=m, n=n)
    e = Entry(p, "triton", None, "2026-12-07T00:00:00+00:00",
              [Measurement("triton", tile, tile_us, tile_us, 0.0, 1.0),
               Measurement("triton", ROW, 10.0, 10.0, 0.0, 1.0)], {}, context=context)
    w = e.winner if context is None else Measurement("triton", tile)
    e.backend, e.config = w.backend, w.config
    return e


def test_a_tie_takes_the_tile_major_layout_another_bucket_holds():
    """M = 1 runs the 64x256 tile by its own choice (10% faster); at M = 8 the same tile is
    1% faster, a tie: alone it keeps row-major weights, beside M = 1 it takes the tile the
    layer holds anyway (the GDN in_proj of session 62's towers)."""
    m1, m8 = layout_entry(1, 9.0), layout_entry(8, 9.9)
    assert (m1.config, m8.config) == (TILE, ROW)
    assert tcache.apply_held_layouts([m1, m8]) == [m8.key]
    assert m8.config == TILE and m8.held == {(64, 256)} and m8.winner.config == TILE
    assert m1.config == TILE and m1.held == frozenset()
    assert tcache.apply_held_layouts([m1, m8]) == []  # the same evidence: the same picks
    # the kept key's choice stands (a fresh tuning's siblings, a candidate the step times)
    m8 = layout_entry(8, 9.9)
    assert tcache.apply_held_layouts([m1, m8], keep=[m8.key]) == [] and m8.config == ROW
    assert m8.winner.config == TILE  # what the rule would serve


def test_only_an_own_choice_of_the_same_shape_and_tile_holds_a_layout():
    m1 = layout_entry(1, 9.0)
    other_tile = layout_entry(8, 9.9, tile={"block_n": 64, "block_k": 512, "packed": True})
    other_shape = layout_entry(16, 9.9, n=96)
    assert tcache.apply_held_layouts([m1, other_tile, other_shape]) == []
    assert other_tile.config == ROW and other_shape.config == ROW
    # two ties hold nothing for each other (no chain: the picks do not depend on the order)
    ties = [layout_entry(8, 9.9), layout_entry(32, 9.95)]
    assert tcache.apply_held_layouts(ties) == [] and [e.config for e in ties] == [ROW, ROW]
    # a tile chosen in the decode step holds it, though the chain timed it in a tie
    ctx = {"step": "s", "ms_per_step": [{"backend": "triton", "config": TILE, "ms": 1.0}]}
    stepped = layout_entry(1, 9.95, context=ctx)
    assert stepped.config == TILE
    assert tcache.apply_held_layouts([stepped, ties[0]]) == [ties[0].key]
    assert ties[0].config == TILE


def test_a_cache_file_serves_the_held_layouts_from_its_evidence(tmp_path):
    """Read back, a file serves what the rule picks from all its entries: M = 8's tile while
    M = 1 holds it; once M = 1 is gone from the file, row-major weights again."""
    m1, m8 = layout_entry(1, 9.0), layout_entry(8, 9.9)
    tcache.apply_held_layouts([m1, m8])
    path = tmp_path / "cpu.json"
    meta = {"format": tcache.CACHE_FORMAT}
    DecisionCache(path, meta).save({e.key: e for e in (m1, m8)})
    back = tcache.read_cache_file(path).entries
    assert back[m8.key].config == TILE and back[m8.key].held == {(64, 256)}
    path.write_text(json.dumps({"meta": meta, "entries": {m8.key: m8.to_json()}}))
    assert tcache.read_cache_file(path).entries[m8.key].config == ROW


def test_beyond_the_tie_the_fastest_wins_whatever_its_host_cost():
    t = 10.0 * (1 + tcache.HOST_TIE) * 1.001
    assert entry_with({"cutlass": 10.0, "triton": t}).winner.backend == "cutlass"
    assert entry_with({"cudnn": 10.0, "cublaslt": 10.1, "cutlass": 10.05}).winner.backend \
        == "cublaslt"


def test_eager_calls_take_the_host_tie_a_cuda_graph_the_fastest_gpu_time(monkeypatch,
                                                                         tmp_path):
    """Unset, FP8TOWER_HOST_TIE gives each mode its rule from one file: a tie goes to
    Triton's cheaper eager host path in eager calls, to CUTLASS's faster GPU time in a CUDA
    graph (Entry.choice_for); 1 / 0 set one rule for both (0: a file written with the tie on
    is read back as CUTLASS's); the memory tie (no second copy of the weights) holds in
    both modes."""
    monkeypatch.delenv("FP8TOWER_HOST_TIE", raising=False)
    e = entry_with({"cutlass": 10.0, "triton": 10.1})
    e.backend = e.winner.backend
    assert (e.backend, e.choice_for(graph=False), e.choice_for(graph=True)) == \
        ("triton", ("triton", None), ("cutlass", None))
    row = tcache.explain_row(e)
    assert (row["winner"]["backend"], row["graph_winner"]["backend"]) == ("triton", "cutlass")
    path = tmp_path / "cpu.json"
    DecisionCache(path, {"format": tcache.CACHE_FORMAT}).save({e.key: e})
    back = tcache.read_cache_file(path).entries[e.key]
    assert (back.backend, back.choice_for(graph=True)) == ("triton", ("cutlass", None))
    tile = layout_entry(1, 9.95)  # the tile 0.5% faster: no second copy in either mode
    assert tile.config == ROW and tile.choice_for(graph=True) == ("triton", ROW)
    monkeypatch.setenv("FP8TOWER_HOST_TIE", "1")
    assert e.choice_for(graph=True) == ("triton", None)
    assert tcache.explain_row(e)["graph_winner"] is None
    monkeypatch.setenv("FP8TOWER_HOST_TIE", "0")
    assert e.winner.backend == "cutlass"
    back = tcache.read_cache_file(path).entries[e.key]
    assert back.backend == "cutlass" and back.choice_for(graph=True) == ("cutlass", None)
    assert layout_entry(1, 9.95).choice_for(graph=True) == ("triton", ROW)
    monkeypatch.setenv("FP8TOWER_HOST_TIE", "maybe")
    with pytest.raises(ValueError, match="FP8TOWER_HOST_TIE"):
        _ = e.winner


def test_a_choice_made_in_the_step_or_forced_serves_cuda_graphs_too(monkeypatch):
    """Where the decode step chose (in-context tuning) or a caller set the choice (the step
    timing each candidate, tower/context.py), a CUDA graph runs it, not the GPU-time pick;
    beyond the tie both modes run the fastest."""
    monkeypatch.delenv("FP8TOWER_HOST_TIE", raising=False)
    e = entry_with({"cutlass": 10.0, "triton": 10.1})
    e.backend = "triton"
    assert dataclasses.replace(e, forced=True).choice_for(graph=True) == ("triton", None)
    ctx = {"step": "s", "ms_per_step": [{"backend": "triton", "config": None, "ms": 1.0}]}
    assert dataclasses.replace(e, context=ctx).choice_for(graph=True) == ("triton", None)
    far = entry_with({"cutlass": 10.0, "triton": 10.3})
    assert far.choice_for(graph=False) == far.choice_for(graph=True) == ("cutlass", None)
    assert tcache.explain_row(far)["graph_winner"] is None


def test_a_cache_entry_written_under_the_old_rule_serves_the_tie_winner():
    e = entry_with({"cutlass": 10.35, "triton": 10.40})
    raw = e.to_json()
    raw["backend"], raw["config"] = "cutlass", None  # the fastest: the rule before host ties
    back = Entry.from_json(e.key, raw)
    assert back.backend == "triton"
    raw["backend"] = "nope"
    with pytest.raises(tcache.EntryError, match="nor within"):
        Entry.from_json(e.key, raw)


def test_native_config_hands_out_copies_of_what_it_found():
    """native_config's lookup is built once per (backend, problem): a caller that changes
    the config it got cannot change what the next lookup finds."""
    clock = FakeClock()
    a = dataclasses.replace(fake_backend("a", clock, {"default": 1.0}),
                            configs=lambda p: [{"id": "a1", "block": 64}])
    p = cpu_problem()
    found, cfg = tsearch.native_config(a, p, {"id": "a1", "block": 64})
    assert found
    cfg["block"] = 128
    assert tsearch.native_config(a, p, {"id": "a1", "block": 64}) == (True, {"id": "a1",
                                                                          "block": 64})
    assert tsearch.native_config(a, p, {"id": "a1", "block": 128}) == (False, None)
