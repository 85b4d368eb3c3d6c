"""Dispatch: explicit backends, auto (hit / tune / safe default), capture safety, the CLI."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest
import torch
from test_tuning import FakeClock, FakeTimer, cfg_id, cpu_problem, entry_with, fake_backend
from typer.testing import CliRunner

from fp8tower import dispatch
from fp8tower.backends import BackendError
from fp8tower.cli.tune import app
from fp8tower.dispatch import Dispatcher
from fp8tower.problem import GemmProblem
from fp8tower.tuning import cache as tcache
from fp8tower.tuning import search, tuner


@pytest.fixture(autouse=True)
def _isolated(monkeypatch, tmp_path):
    """Each test: its own cache dir, no tuning env vars, a fresh process dispatcher."""
    monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("FP8TOWER_TUNE", raising=False)
    monkeypatch.delenv("FP8TOWER_RETUNE", raising=False)
    dispatch.reset()
    yield
    dispatch.reset()


def three(clock):
    """Fakes in fallback order: 'slow' first (the safe default), 'fast' wins when tuned."""
    return [
        fake_backend("slow", clock, {"default": 20.0}),
        fake_backend("fast", clock, {"default": 10.0, "f1": 6.0}),
        fake_backend("never", clock, {"default": 1.0}, reason="cannot serve (fake)"),
    ]


def gpu_problem(m=4) -> GemmProblem:
    return GemmProblem(m=m, n=64, k=32, scheme="per_tensor", capability=(9, 0))


# ----------------------------------------------------------------------------- explicit


def test_explicit_unknown_backend():
    with pytest.raises(BackendError, match=r"unknown backend 'nope': expected auto or one of "
                       r".*reference"):
        dispatch.resolve(cpu_problem(), "nope")


def test_explicit_cublaslt_on_cpu_problem_names_the_reason():
    with pytest.raises(BackendError, match=r"'cublaslt' cannot serve .*(CUDA|cuda)"):
        dispatch.resolve(cpu_problem(), "cublaslt")


def test_explicit_backend_bypasses_tuning():
    clock = FakeClock()
    timer = FakeTimer(clock)
    d = Dispatcher(candidates=three(clock), timer=timer, tune=True, persist=False)
    b, cfg = d.resolve(cpu_problem(), "slow")
    assert b.name == "slow" and cfg is None and timer.calls == 0
    with pytest.raises(BackendError, match="cannot serve.*fake"):
        d.resolve(cpu_problem(), "never")
    assert d.resolve(cpu_problem(), b) == (b, None)  # a descriptor works too


def test_auto_on_cpu_is_the_reference_default_without_timing():
    b, cfg = dispatch.resolve(cpu_problem(), "auto")
    assert b.name == "reference" and cfg is None
    assert dispatch.stats()["defaults"] == 1
    assert not (tcache.default_cache_dir()).exists()  # nothing tuned, nothing written


# ----------------------------------------------------------------------------- auto


def test_auto_tunes_once_then_hits_memo_and_file(tmp_path):
    clock = FakeClock()
    timer = FakeTimer(clock)
    d = Dispatcher(candidates=three(clock), timer=timer, tune=True)
    b, cfg = d.resolve(cpu_problem(m=3))
    assert (b.name, cfg) == ("fast", {"id": "f1", "block": 64})
    assert timer.calls == 3  # slow, fast, fast/f1: 'never' cannot serve
    assert d.resolve(cpu_problem(m=3)) == (b, cfg)
    assert d.resolve(cpu_problem(m=4)) == (b, cfg)  # same bucket: no new tuning
    assert timer.calls == 3 and d.stats["tuned"] == 1
    path = tmp_path / "cache" / "cpu.json"
    assert cpu_problem(m=4).key() in json.loads(path.read_text())["entries"]

    # A new process (dispatcher) hits the file: no timing.
    timer2 = FakeTimer(clock)
    d2 = Dispatcher(candidates=three(clock), timer=timer2, tune=True)
    b2, cfg2 = d2.resolve(cpu_problem(m=4))
    assert (b2.name, cfg2) == ("fast", {"id": "f1", "block": 64}) and timer2.calls == 0
    assert d2.stats["hits"] == 1


def test_retune_env_forces_tuning_once_per_key(monkeypatch):
    clock = FakeClock()
    Dispatcher(candidates=three(clock), timer=FakeTimer(clock), tune=True).resolve(cpu_problem())
    monkeypatch.setenv("FP8TOWER_RETUNE", "1")
    timer = FakeTimer(clock)
    d = Dispatcher(candidates=three(clock), timer=timer, tune=True)
    d.resolve(cpu_problem(m=3))
    d.resolve(cpu_problem(m=4))  # same key, already retuned by this dispatcher
    assert timer.calls == 3


def test_tune_disabled_by_env_takes_safe_default(monkeypatch):
    monkeypatch.setenv("FP8TOWER_TUNE", "0")
    clock = FakeClock()
    timer = FakeTimer(clock)
    d = Dispatcher(candidates=three(clock), timer=timer, gpu_name="Fake GPU")
    b, cfg = d.resolve(gpu_problem())
    assert (b.name, cfg) == ("slow", None) and timer.calls == 0 and d.stats["defaults"] == 1


def test_safe_default_skips_unable_and_errors_when_none():
    clock = FakeClock()
    fakes = three(clock)
    d = Dispatcher(candidates=[fakes[2], fakes[1]], tune=False, persist=False)
    assert d.resolve(cpu_problem())[0].name == "fast"
    d = Dispatcher(candidates=[fakes[2]], tune=False, persist=False)
    with pytest.raises(BackendError, match="no backend can serve.*never: cannot serve"):
        d.resolve(cpu_problem())


def test_all_candidates_fail_gives_default_and_saves_nothing(tmp_path):
    clock = FakeClock()
    bad = [fake_backend("oom1", clock, {"default": 1.0}, fail=("default",)),
           fake_backend("oom2", clock, {"default": 1.0}, fail=("default",))]
    d = Dispatcher(candidates=bad, timer=FakeTimer(clock), tune=True)
    with pytest.warns(RuntimeWarning, match="measured nothing.*OutOfMemoryError"):
        b, _ = d.resolve(cpu_problem())
    assert b.name == "oom1" and d.stats["tune_failed"] == 1
    assert not (tmp_path / "cache" / "cpu.json").exists()


def test_stale_config_in_cache_is_not_trusted(tmp_path):
    """The 'fast' backend no longer offers f1: the cached choice is not used; the entry's
    fastest measured candidate that still runs (fast's default, 10 us) serves instead."""
    clock = FakeClock()
    Dispatcher(candidates=three(clock), timer=FakeTimer(clock), tune=True).resolve(cpu_problem())
    changed = [fake_backend("slow", clock, {"default": 20.0}),
               fake_backend("fast", clock, {"default": 10.0, "f2": 3.0})]
    timer = FakeTimer(clock)
    d = Dispatcher(candidates=changed, timer=timer, tune=False)
    with pytest.warns(tcache.TuningCacheWarning,
                      match=r"no longer offers.*fastest runnable candidate, fast None \(10.00 us"):
        b, cfg = d.resolve(cpu_problem())
    assert (b.name, cfg) == ("fast", None) and timer.calls == 0


def _layout_backend(clock, times: dict[str, float]):
    """'fast' with two configs: 'row' (row-major weights) and 'tile' (tile-major, 64x256)."""
    cfgs = [{"id": "row", "block_n": 64, "block_k": 256},
            {"id": "tile", "block_n": 64, "block_k": 256, "packed": True}]
    return dataclasses.replace(fake_backend("fast", clock, {"default": 99.0, **times}),
                               configs=lambda problem: [dict(c) for c in cfgs])


def test_a_sibling_holding_a_tile_moves_a_served_tie_onto_it():
    """M = 8 served row-major weights (its tile-major config 1% faster: a tie); a new tuning
    of M = 1 that runs the tile by its own choice moves M = 8 onto it at once (memo dropped:
    the layer holds that copy anyway); tuned after it, M = 16 takes the tile from the start."""
    clock = FakeClock()
    d = Dispatcher(candidates=[_layout_backend(clock, {"row": 10.0, "tile": 9.9})],
                   timer=FakeTimer(clock), tune=True)
    p8 = cpu_problem(m=8)
    assert d.resolve(p8)[1]["id"] == "row"
    m1 = entry_with({"fast": 1.0}, cpu_problem(m=1))
    m1.candidates = [tcache.Measurement("fast", c, us, us, 0.0, 1.0)
                     for c, us in (({"id": "tile", "block_n": 64, "block_k": 256,
                                     "packed": True}, 9.0),
                                   ({"id": "row", "block_n": 64, "block_k": 256}, 10.0))]
    m1.backend, m1.config = "fast", m1.candidates[0].config
    tuner.save(d.accept(cpu_problem(m=1), m1), m1)
    assert d.resolve(p8)[1]["id"] == "tile"
    assert d.resolve(cpu_problem(m=16))[1]["id"] == "tile"
    saved = tcache.read_cache_file(next(d.cache_dir.glob("*.json"))).entries
    assert [saved[cpu_problem(m=m).key()].config["id"] for m in (1, 8, 16)] == ["tile"] * 3


def test_stale_in_context_choice_falls_back_on_the_steps_ranking():
    """An entry tuned in context whose choice (f1) is no longer offered: the fallback is the
    candidate its context step ran fastest (slow's default, 1.05 ms), not the fastest per
    GEMM (fast's default, 10 us against 20)."""
    clock = FakeClock()
    p = cpu_problem()
    d = Dispatcher(candidates=three(clock), timer=FakeTimer(clock), tune=True)
    d.resolve(p)
    entry = d.entries_for(p)[p.key()]
    f1 = entry.config
    assert f1["id"] == "f1"
    ctx = {"step": "fake", "date": "d", "ms_per_step": [
        {"backend": "fast", "config": f1, "ms": 1.0},
        {"backend": "fast", "config": None, "ms": 1.2},
        {"backend": "slow", "config": None, "ms": 1.05}]}
    tuner.save(d.accept(p, dataclasses.replace(entry, context=ctx)),
               dataclasses.replace(entry, context=ctx))
    assert [(m.backend, ms) for m, ms in d.entries_for(p)[p.key()].fallbacks()] == \
        [("fast", 1.0), ("slow", 1.05), ("fast", 1.2)]
    changed = [fake_backend("slow", clock, {"default": 20.0}),
               fake_backend("fast", clock, {"default": 10.0, "f2": 3.0})]
    d = Dispatcher(candidates=changed, timer=FakeTimer(clock), tune=False)
    with pytest.warns(tcache.TuningCacheWarning, match=r"no longer offers config .*f1.*; using its "
                      r"fastest runnable candidate, slow None \(1.0500 ms per step in its context"):
        b, cfg = d.resolve(p)
    assert (b.name, cfg) == ("slow", None)


def test_no_runnable_candidate_left_takes_the_safe_default():
    clock = FakeClock()
    Dispatcher(candidates=three(clock)[1:2], timer=FakeTimer(clock), tune=True).resolve(cpu_problem())
    d = Dispatcher(candidates=[fake_backend("slow", clock, {"default": 20.0})], tune=False)
    with pytest.warns(tcache.TuningCacheWarning, match="names backend 'fast', not registered"):
        b, cfg = d.resolve(cpu_problem())
    assert (b.name, cfg) == ("slow", None) and d.stats["defaults"] == 1


def test_backends_env_restricts_auto_to_the_named_backends(monkeypatch):
    """FP8TOWER_BACKENDS: the process dispatcher's pool, in registry order; a cached winner
    outside it gives way to the best measured candidate inside it (here the reference)."""
    from fp8tower import backends

    monkeypatch.setenv("FP8TOWER_BACKENDS", "reference, triton")
    dispatch.reset()
    pool = [b.name for b in dispatch.default_dispatcher().pool()]
    assert pool == [n for n in backends.names() if n in ("reference", "triton")]
    monkeypatch.setenv("FP8TOWER_BACKENDS", "triton,cutlas")
    dispatch.reset()
    with pytest.raises(BackendError, match=r"FP8TOWER_BACKENDS='triton,cutlas'.*cutlas;.*cutlass"):
        dispatch.default_dispatcher()
    monkeypatch.setenv("FP8TOWER_BACKENDS", "reference")
    dispatch.reset()
    with pytest.raises(BackendError, match="'triton' is not among this dispatcher's candidates"):
        dispatch.resolve(cpu_problem(), "triton")
    e = entry_with({"triton": 5.0, "cutlass": 4.0, "reference": 90.0}, problem=cpu_problem())
    with pytest.warns(tcache.TuningCacheWarning, match="not registered among.*reference"):
        b, _ = dispatch.default_dispatcher().choice(cpu_problem(), e)
    assert b.name == "reference"
    only_outside = entry_with({"cutlass": 4.0, "triton": 5.0}, problem=cpu_problem(m=8))
    with pytest.warns(tcache.TuningCacheWarning, match="not registered among"):
        assert dispatch.default_dispatcher().choice(cpu_problem(m=8), only_outside) is None


def test_memo_hit_is_a_dict_lookup():
    calls = {"check": 0}
    clock = FakeClock()
    fake = fake_backend("only", clock, {"default": 1.0})

    def check(problem):  # counts, and is always able (returns None)
        calls["check"] += 1

    only = dataclasses.replace(fake, check=check)
    d = Dispatcher(candidates=[only], tune=False, persist=False)
    for _ in range(100):
        d.resolve(cpu_problem())
    assert calls["check"] == 1


# ----------------------------------------------------------------------------- capture


def test_capture_miss_takes_default_counts_and_warns_once(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    clock = FakeClock()
    timer = FakeTimer(clock)
    d = Dispatcher(candidates=three(clock), timer=timer, tune=True, gpu_name="Fake GPU")
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        assert d.resolve(gpu_problem())[0].name == "slow"
        assert d.resolve(gpu_problem())[0].name == "slow"
        assert d.resolve(gpu_problem(m=64))[0].name == "slow"
    assert timer.calls == 0 and d.stats["capture_misses"] == 3
    msgs = [str(w.message) for w in rec]
    assert len(msgs) == 1
    assert "fp8tower tune --shapes 64x32 --m 4 --scheme per_tensor" in msgs[0]
    # After capture, a miss is resolved (here: tuning off) and memoized.
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    d._tune_policy = False
    assert d.resolve(gpu_problem())[0].name == "slow" and d.stats["defaults"] == 1


def test_capture_uses_a_cached_entry(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    p = gpu_problem()
    e = entry_with({"fast": 5.0, "slow": 9.0}, p)
    cache = tcache.DecisionCache.for_device(tmp_path / "cache", "Fake GPU")
    cache.save({e.key: e})
    assert cache.path.name == "fake-gpu.json"
    clock = FakeClock()
    d = Dispatcher(candidates=three(clock), timer=FakeTimer(clock), gpu_name="Fake GPU")
    assert d.resolve(p) == (d.pool()[1], None)
    assert d.stats["capture_misses"] == 0 and d.stats["hits"] == 1


def test_a_cuda_graph_is_served_the_fastest_gpu_time_of_a_tie(monkeypatch, tmp_path):
    """One cached tie, two choices: eager calls get Triton (the cheaper eager host path), a
    CUDA graph's (graph=True, as run_2d asks under capture) CUTLASS, 1% faster; each memoized
    and both dropped by a new tuning of the key. A pick that cannot run here (outside the
    pool) leaves the graph on the eager choice, silently; a capture's miss is not memoized."""
    monkeypatch.delenv("FP8TOWER_HOST_TIE", raising=False)
    p = gpu_problem()
    e = entry_with({"cutlass": 10.0, "triton": 10.1}, p)
    e.backend = e.winner.backend
    cache = tcache.DecisionCache.for_device(tmp_path / "cache", "Fake GPU")
    cache.save({e.key: e})
    clock = FakeClock()
    pool = [fake_backend(n, clock, {"default": 10.0}) for n in ("triton", "cutlass")]
    d = Dispatcher(candidates=pool, timer=FakeTimer(clock), tune=False, gpu_name="Fake GPU")
    assert d.resolve(p)[0].name == "triton"
    assert d.resolve(p, graph=True)[0].name == "cutlass"
    assert d._graph_memo[p] is d.resolve(p, graph=True) and d.stats["hits"] == 1
    d.accept(p, dataclasses.replace(e, backend="triton", forced=True))
    assert p not in d._graph_memo and d.resolve(p, graph=True)[0].name == "triton"
    narrow = Dispatcher(candidates=pool[:1], tune=False, gpu_name="Fake GPU")
    assert narrow.resolve(p, graph=True)[0].name == "triton"
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    miss = gpu_problem(m=16)
    with pytest.warns(RuntimeWarning, match="not tuned"):
        assert d.resolve(miss, graph=True)[0].name == "triton"  # the safe default
    assert miss not in d._graph_memo and miss not in d._memo


# ----------------------------------------------------------------------------- CLI


def write_cli_cache(path):
    e = entry_with({"cublaslt": 8.0, "reference": 10.0},
                   GemmProblem(m=4, n=1024, k=5120, scheme="per_tensor", capability=(9, 0)))
    e.candidates.append(tcache.Measurement("cublaslt", {"tile": 128}, error="OutOfMemoryError: x"))
    e.pruned = {"cublaslt": 2}
    tcache.DecisionCache(path, tcache.environment_meta("NVIDIA H200")).save({e.key: e})
    return e


def test_cli_dispatch_explain_text(tmp_path):
    path = tmp_path / "nvidia-h200.json"
    write_cli_cache(path)
    res = CliRunner().invoke(app, ["dispatch", "--file", str(path), "--explain"])
    assert res.exit_code == 0, res.output
    out = res.output
    assert "1024x5120" in out and "cublaslt[default]" in out and "reference[default]" in out
    assert "+25.0%" in out  # margin: 10 / 8 - 1
    assert "2 ok, 1 failed, 2 pruned" in out
    assert "failed m4_n1024_k5120" in out


def test_cli_dispatch_shows_what_a_cuda_graph_runs_where_it_differs(tmp_path, monkeypatch):
    monkeypatch.delenv("FP8TOWER_HOST_TIE", raising=False)
    e = entry_with({"cutlass": 10.0, "triton": 10.1},
                   GemmProblem(m=4, n=1024, k=5120, scheme="per_tensor", capability=(9, 0)))
    e.backend = e.winner.backend
    path = tmp_path / "nvidia-h200.json"
    tcache.DecisionCache(path, tcache.environment_meta("NVIDIA H200")).save({e.key: e})
    res = CliRunner(env={"COLUMNS": "200"}).invoke(app, ["dispatch", "--file", str(path)])
    assert res.exit_code == 0, res.output
    assert "triton[default]; CUDA graphs: cutlass[default] 10.00 us" in res.output
    assert "fastest GPU time in a CUDA graph" in res.output
    res = CliRunner().invoke(app, ["dispatch", "--file", str(path), "--json"])
    row = json.loads(res.output)["decisions"][0]
    assert (row["winner"]["backend"], row["graph_winner"]["backend"]) == ("triton", "cutlass")


def test_cli_dispatch_json_and_filters(tmp_path):
    path = tmp_path / "nvidia-h200.json"
    e = write_cli_cache(path)
    res = CliRunner().invoke(app, ["dispatch", "--file", str(path), "--json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    (row,) = doc["decisions"]
    assert row["key"] == e.key and row["winner"]["backend"] == "cublaslt"
    assert row["margin"] == pytest.approx(0.25) and row["m_bucket"] == 4
    assert doc["files"][0]["meta"]["gpu"] == "NVIDIA H200"
    res = CliRunner().invoke(app, ["dispatch", "--file", str(path), "--json", "--m", "64"])
    assert json.loads(res.output)["decisions"] == []
    res = CliRunner().invoke(app, ["dispatch", "--file", str(path), "--json",
                                   "--shapes", "1024x5120", "--scheme", "per_tensor"])
    assert len(json.loads(res.output)["decisions"]) == 1


def test_cli_dispatch_refuses_a_missing_or_corrupt_file(tmp_path):
    """An explicit --file that is not there, or not a cache, is an error (it listed "no
    tuned decisions" with exit code 0)."""
    res = CliRunner().invoke(app, ["dispatch", "--file", str(tmp_path / "none.json")])
    assert res.exit_code == 2 and "no such file" in res.output
    bad = tmp_path / "bad.json"
    bad.write_text("{bad")
    res = CliRunner().invoke(app, ["dispatch", "--file", str(bad)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and "not a tuning cache: corrupt or truncated JSON" in out
    assert "ignored" not in out  # it exits: nothing goes on without the file


def test_cli_dispatch_reads_a_gzipped_cache(tmp_path):
    """The repository commits its tuning caches gzipped (benchmarks/compact_results.py): they
    read as they are, not "unreadable"."""
    import gzip

    path = tmp_path / "nvidia-h200.json"
    e = write_cli_cache(path)
    gz = tmp_path / "tuning_cache.json.gz"
    gz.write_bytes(gzip.compress(path.read_bytes()))
    res = CliRunner().invoke(app, ["dispatch", "--file", str(gz), "--json"])
    assert res.exit_code == 0, res.output
    (row,) = json.loads(res.output)["decisions"]
    assert row["key"] == e.key and row["winner"]["backend"] == "cublaslt"
    gz.write_bytes(gzip.compress(path.read_bytes())[:40])  # truncated
    res = CliRunner().invoke(app, ["dispatch", "--file", str(gz)])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and "not a tuning cache: unreadable" in out, out


def test_cli_dispatch_lists_cache_dir_without_gpu(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("CPU behaviour")
    write_cli_cache(tmp_path / "cache" / "nvidia-h200.json")
    res = CliRunner().invoke(app, ["dispatch"])
    assert res.exit_code == 0 and "NVIDIA H200" in res.output and "cublaslt" in res.output


def test_cli_tune_needs_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("CPU behaviour")
    res = CliRunner().invoke(app, ["tune", "--shapes", "1024x5120", "--m", "1,2"])
    assert res.exit_code == 2 and "needs a CUDA GPU" in res.output
    res = CliRunner().invoke(app, ["tune", "--model", "qwen3.5-27b", "--scheme", "block128"])
    assert res.exit_code == 2 and "needs a CUDA GPU" in res.output


_DTYPES = "expected one of bfloat16, float16, float32"


@pytest.mark.parametrize("args,message", [
    (["tune"], "give --model and/or --shapes"),
    (["tune", "--shapes", "10x"], "'10x' is not NxK"),
    (["tune", "--shapes", "8x8", "--m", "0"], "'0': expected positive integers"),
    (["tune", "--shapes", "8x8", "--scheme", "int4"], "unknown scheme 'int4'"),
    (["tune", "--model", "nope"], "got 'nope'; expected a shipped name"),
    (["tune", "--shapes", "8x8", "--in-context"], "give --model"),
    # dtypes the tuner cannot use: int32 / bool / float8_e5m2 crashed it later, complex64
    # built a key (a8_cli_dtypes.py)
    *[(["tune", "--shapes", "8x8", "--act-dtype", t], (f"'{t}' is not supported: {_DTYPES}, "
       "float8_e4m3fn")) for t in ("int32", "bool", "float8_e5m2", "complex64")],
    (["tune", "--shapes", "8x8", "--out-dtype", "float8_e4m3fn"],
     f"'float8_e4m3fn' is not supported: {_DTYPES}"),
    (["tune", "--shapes", "8x8", "--act-dtype", "float8_e4m3fn", "--scheme", "block128"],
     ("--act-dtype float8_e4m3fn with --scheme block128: fp8_linear takes FP8 activations for "
     "per_tensor with a static scale only")),
    (["tune", "--shapes", "8x8", "--act-dtype", "float8_e4m3fn", "--scheme", "per_tensor",
      "--dynamic-act-scale"], "--act-dtype float8_e4m3fn with --dynamic-act-scale"),
    # both conflicts in one line, the default scheme said to be the default (session 42 audit:
    # it named a --scheme never typed, and its fix led to the second error)
    (["tune", "--shapes", "8x8", "--act-dtype", "float8_e4m3fn", "--dynamic-act-scale"],
     ("--act-dtype float8_e4m3fn with the default --scheme channel_token,block128 and "
      "--dynamic-act-scale: fp8_linear takes FP8 activations for per_tensor with a static "
      "scale only (give --scheme per_tensor and drop --dynamic-act-scale)")),
    # model options without a model were ignored
    (["tune", "--shapes", "8x8", "--unmerged"], ("--merged/--unmerged selects the GEMMs of "
     "--model; without --model it would be ignored")),
    (["tune", "--shapes", "8x8", "--parts", "mlp"], "--parts selects the GEMMs of --model"),
    (["dispatch", "--merged", "--parts", "mlp"], "--merged/--unmerged and --parts select"),
    # parts that name no FP8 GEMM of the model filtered nothing (dispatch) or tuned nothing
    *[([cmd, "--model", model, "--parts", parts],
       f"'{parts}' names no FP8 GEMMs of {model}; expected one or more of {kinds}")
      for cmd in ("tune", "dispatch") for model, parts, kinds in (
          ("qwen3-8b", "gdn", "attention, mlp"),)],
    # "other" is a LinearSpec kind no tower models: not offered as a part
    *[([cmd, "--model", "qwen3.5-27b", "--parts", "other"],
       ("parts: got 'other'; expected one or more of gdn, attention, mlp (comma-separated), "
        "or 'all'")) for cmd in ("tune", "dispatch")],
    # --in-context re-ranks the model step's keys, not those the flags make
    *[(["tune", "--model", "qwen3.5-27b", "--in-context", *flag],
       f"not the keys {' '.join(flag)} make") for flag in (
        ["--dynamic-act-scale"], ["--channel-scale"], ["--bias"], ["--act-dtype", "float16"],
        ["--out-dtype", "float32"])],
])
def test_cli_tune_rejects_bad_arguments(args, message):
    """Exit code 2 alone proved nothing: every tune call gets it on a CPU machine ('needs a
    CUDA GPU'). Each refusal names the bad value and what was expected."""
    res = CliRunner().invoke(app, args)
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and message in out and "needs a CUDA GPU" not in out, out


def test_cli_tune_says_which_bucket_an_m_tunes():
    if torch.cuda.is_available():
        pytest.skip("CPU behaviour (on a GPU the command goes on to tune)")
    res = CliRunner().invoke(app, ["tune", "--shapes", "8x8", "--m", "1,3,100"])
    out = " ".join(res.output.split())
    assert "--m 100 tunes the key of its bucket, M = 128 (it serves M = 65-128)" in out
    assert "--m 3 tunes the key of its bucket, M = 4" in out and "--m 1 " not in out


def test_cli_tune_help_says_what_max_configs_bounds():
    """--max-configs 0 still timed 5-7 configs a backend (a9_maxcfg.py): the priority configs
    and the winner's refinements and layouts are not bounded by it."""
    res = CliRunner().invoke(app, ["tune", "--help"])
    out = " ".join(res.output.split())
    assert "0 still times those" in out and "priority configs" in out


def test_cli_tune_help_says_how_in_context_confirms_a_move():
    """It said "a move confirmed by a third timing", then "by a second pair of timings";
    tower.context confirms by four (ABBA), for up to CONFIRMS challengers."""
    from fp8tower.tower.context import CONFIRMS

    res = CliRunner().invoke(app, ["tune", "--help"])
    out = " ".join(res.output.split())
    assert "third timing" not in out and "second pair" not in out
    assert ("a move confirmed by four more timings (current, challenger, challenger, "
            f"current), tried for up to {CONFIRMS} challengers") in out


def test_cli_tune_in_context_needs_a_gpu_whatever_the_stand_in(monkeypatch):
    """tune needs a GPU: with --standin rows it advised the CPU interpreter
    (check_standin_device's "on the CPU, set TRITON_INTERPRET=1"), which tune cannot use."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    res = CliRunner().invoke(app, ["tune", "--model", "tiny-hybrid", "--merged", "--in-context",
                                   "--standin", "rows"])
    out = " ".join(res.output.split())
    assert res.exit_code == 2 and "tuning needs a CUDA GPU" in out, out
    assert "TRITON_INTERPRET" not in out


def _accept_triton_defaults(d, problems) -> list:
    """A fake pretune's work: each problem's Triton default as its tuned entry in ``d``."""
    from fp8tower.kernels import configs as kc
    from fp8tower.tuning.cache import Entry, Measurement

    out = []
    for p in problems:
        base = kc.default_config(p)
        out.append(Entry(p, "triton", base, "2026-12-01",
                         [Measurement("triton", base, 10.0, 10.0, 0.0, 1.0)]))
        d.accept(p, out[-1])
    return out


def _fake_gpu_towers(monkeypatch) -> None:
    """tune's CUDA checks pass on the CPU: a "Fake GPU" posing CPU keys, its towers on the CPU."""
    from fp8tower.tower import build

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda *a: None)  # CPU keys
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda *a: "Fake GPU")
    real_build = build.build_tower
    monkeypatch.setattr(build, "build_tower", lambda *a, **k: real_build(*a, **k, device="cpu"))


def test_cli_tune_in_context_tail(monkeypatch, interpret):
    """tune --in-context --standin rows_fp8 on the CPU (the CUDA check, pretune and refine
    faked): each step is refined under its stand-in, and the keys only the steps pose (FP8
    x) are tuned first with tune's own options (they were left to the warm-up's default
    pretune, or to nothing where the policy forbids tuning), then listed once each."""
    import fp8tower.tower.context
    from fp8tower.tower import build

    _fake_gpu_towers(monkeypatch)
    calls = []

    def fake_pretune(d, problems, **kw):
        problems = list(problems)
        calls.append(([p.key() for p in problems], kw))
        return _accept_triton_defaults(d, problems)

    refined = []

    def fake_refine(tower, advance=None):
        d = dispatch.default_dispatcher()
        refined.append((build.STANDIN_KERNEL,
                        {str(p.act_dtype).removeprefix("torch.") for p in tower.gemm_problems()},
                        [p.key() for p in tower.gemm_problems() if d.entries_for(p).get(p.key())
                         is None]))
        return []

    monkeypatch.setattr(tuner, "pretune", fake_pretune)
    monkeypatch.setattr(fp8tower.tower.context, "refine", fake_refine)
    res = CliRunner().invoke(app, [
        "tune", "--model", "tiny-hybrid", "--merged", "--scheme", "per_tensor", "--m", "1,8",
        "--in-context", "--standin", "rows_fp8", "--no-ceiling", "--max-configs", "3", "--full",
        "--no-precompile", "--retune", "--json"])
    assert res.exit_code == 0, res.output
    # each step refined under rows_fp8 (its FP8-x keys posed), every key tuned by then
    assert refined == [("rows_fp8", {"bfloat16", "float8_e4m3fn"}, [])] * 2
    want = {"retune": True, "read_ceiling_gbps": None, "max_configs": 3, "full": True,
            "precompile": False}
    assert [kw for _, kw in calls] == [want] * 3  # tune's keys, then each step's own
    step_keys = set(calls[1][0] + calls[2][0])
    assert step_keys and all("float8_e4m3fn" in k for k in step_keys)
    assert not any("float8" in k for k in calls[0][0])
    listed = [r["key"] for r in json.loads(res.stdout)["decisions"]]
    assert sorted(k for k in listed if "float8" in k) == sorted(step_keys)  # once each
    assert len(listed) == len(set(listed)) == len(set(calls[0][0])) + len(step_keys)


@pytest.mark.parametrize("argv, hinted", [
    (["--model", "tiny-hybrid", "--m", "1,8"], True),
    (["--model", "tiny-hybrid", "--m", "1,4"], False),  # below the M it was seen from
    (["--model", "tiny-hybrid", "--m", "64", "--in-context"], False),  # already re-ranked
    (["--shapes", "8x8", "--m", "64"], False),  # no model: no step to re-rank in
])
def test_cli_tune_suggests_in_context_from_m_8(monkeypatch, interpret, argv, hinted):
    """A model tuned at M >= 8 without --in-context is told, on stderr, that the step may
    rank differently (sessions 60-63: the 27B towers' moves were at M = 8, 32 and 64 but
    one, weight_only's at M = 1 on an H100)."""
    import fp8tower.tower.context
    from fp8tower.cli.tune import IN_CONTEXT_HINT

    _fake_gpu_towers(monkeypatch)

    monkeypatch.setattr(tuner, "pretune", lambda d, problems, **kw: _accept_triton_defaults(
        d, problems))
    monkeypatch.setattr(fp8tower.tower.context, "refine", lambda tower, advance=None: [])
    res = CliRunner().invoke(app, ["tune", *argv, "--scheme", "per_tensor", "--no-ceiling",
                                   "--no-precompile", "--json"])
    assert res.exit_code == 0, res.output
    assert (IN_CONTEXT_HINT in res.stderr) is hinted
    assert IN_CONTEXT_HINT not in res.stdout  # the JSON stays parseable
    json.loads(res.stdout)


def test_context_tables_say_which_stand_in_decided(capsys):
    """Rows and entries of torch, rows and rows_fp8 steps re-rank the same keys: the tables
    name the stand-in kernel (not recorded by older entries: '-', or nothing)."""
    from fp8tower.cli.tune import _context_step, _print_context

    rows = [{"scheme": "per_tensor", "arm": "merged", "m": 1, "key": k, "kept": "a",
             "candidates": [], **extra}
            for k, extra in (("k_new", {"standin": "rows_fp8"}), ("k_old", {}))]
    _print_context(rows)
    lines = capsys.readouterr().out.splitlines()
    assert "stand-in" in next(ln for ln in lines if "scheme" in ln)
    assert "rows_fp8" in next(ln for ln in lines if "k_new" in ln)
    assert " - " in next(ln for ln in lines if "k_old" in ln)
    assert _context_step({"step": "tiny-hybrid merged M=1", "standin": "rows"}) == \
        "tiny-hybrid merged M=1, stand-in rows"
    assert _context_step({"step": "tiny-hybrid merged M=1"}) == "tiny-hybrid merged M=1"


def test_context_explain_shows_each_candidates_chain_and_step_gaps(capsys):
    """tune --in-context --explain: each candidate's gap to the current choice in the chain and
    in the step (per GEMM of the key), '-' where a row predates them; without --explain only
    the per-key table."""
    from fp8tower.cli.tune import _print_context

    cand = {"backend": "triton", "config": {"split_k": 2}, "ms": 2.9741}
    rows = [{"scheme": "per_tensor", "arm": "merged", "m": 32, "key": "k_new", "kept": "a",
             "gemms": 64, "candidates": [{**cand, "chain_delta_us": 0.375,
                                          "step_delta_us": -0.202}]},
            {"scheme": "per_tensor", "arm": "merged", "m": 32, "key": "k_old", "kept": "a",
             "candidates": [cand]}]
    _print_context(rows)
    assert "chain" not in capsys.readouterr().out
    _print_context(rows, explain=True)
    lines = capsys.readouterr().out.splitlines()
    new = [ln for ln in lines if "k_new" in ln]
    assert len(new) == 2 and "+0.38" in new[1] and "-0.20" in new[1] and " 64 " in new[1]
    old = [ln for ln in lines if "k_old" in ln][1]
    assert "2.9741" in old and "+" not in old.split("2.9741")[1]


@pytest.mark.parametrize("argv, says", [
    (["--standin", "rows"], "--standin rows chooses the stand-ins of the step --in-context times"),
    (["--in-context", "--standin", "rows_fp8", "--scheme", "per_tensor,block128"],
     "--scheme per_tensor,block128: pass --scheme per_tensor"),
    (["--in-context", "--standin", "rowz"], "--standin 'rowz': expected one of torch, rows"),
])
def test_cli_tune_standin_is_checked_before_any_gpu_work(argv, says):
    """tune --standin: only with --in-context (it sets the step that re-ranks), one of the
    tower's kernels, rows_fp8 for per_tensor alone; refused by name on any machine."""
    res = CliRunner().invoke(app, ["tune", "--model", "tiny-hybrid", "--merged", *argv])
    assert res.exit_code == 2, res.output
    assert says in " ".join(res.output.split())


def test_in_context_with_rows_fp8_steps_pose_the_fp8_x_keys(monkeypatch):
    """Under --standin rows_fp8 the GEMMs after a stand-in read FP8 x: the steps pose those
    keys (act dtype float8_e4m3fn), which `tune` then lists among its decisions; with torch's
    stand-in the same GEMMs pose bf16 keys."""
    import fp8tower.tower.context
    from fp8tower.cli.tune import _refine_in_context
    from fp8tower.formats import Scheme
    from fp8tower.models import get_spec
    from fp8tower.tower.build import standin_kernel

    monkeypatch.setattr(fp8tower.tower.context, "refine", lambda tower, advance=None: [])
    spec = get_spec("tiny-hybrid")

    def stepped(kernel):
        with standin_kernel(kernel):
            _, problems = _refine_in_context(spec, [Scheme.PER_TENSOR], [1, 8], True,
                                             "gdn,attention", progress=False)
        return problems

    fp8, plain = stepped("rows_fp8"), stepped("torch")
    assert {p.m for p in fp8} == {1, 8} and len(fp8) == len(plain)
    assert {str(p.act_dtype) for p in plain} == {"torch.bfloat16"}
    assert {str(p.act_dtype) for p in fp8} == {"torch.float8_e4m3fn", "torch.bfloat16"}
    # the same GEMMs, those after a stand-in posed with FP8 x
    assert [(p.n, p.k) for p in fp8] == [(p.n, p.k) for p in plain]


@pytest.mark.parametrize("scheme", ["per_tensor", "channel_token", "block128"])
@pytest.mark.parametrize("arm", ["unmerged", "merged"])
def test_cli_tune_poses_the_keys_the_models_tower_runs(scheme, arm):
    """`fp8tower tune --model M --merged` tuned per_tensor merge groups under the scalar-scale
    key, while a merged per_tensor module carries one scale per shard (a channel-scale key):
    the keys the model ran were tuned only at their first call (found 2026-12-02, the 27B's
    cache). Now the keys it tunes are the tower's own, no more, no less. block128 merged:
    tiny-hybrid's groups (gdn_in 320+192, qkv 384+96+96) cannot merge exactly (a block row
    would straddle two members), so its tower is refused, and convert keeps such a group's
    members unmerged: tune poses the unmerged tower's keys, not the groups' (it posed those,
    keys no model runs)."""
    from fp8tower.cli.tune import _gemms_from, tune_problems
    from fp8tower.formats import Scheme
    from fp8tower.nn.merged import MergeError
    from fp8tower.problem import m_bucket
    from fp8tower.tower.build import build_tower

    s = Scheme.parse(scheme)
    gemms, _ = _gemms_from("tiny-hybrid", None, arm == "merged", "gdn,attention")
    if (scheme, arm) == ("block128", "merged"):
        with pytest.raises(MergeError, match="not a multiple of 128"):
            build_tower("tiny-hybrid", scheme=scheme, arm=arm, device="cpu")
        arm = "unmerged"  # what such a model runs
    for m in (1, 3):
        tower = build_tower("tiny-hybrid", scheme=scheme, arm=arm, m=m, device="cpu")
        want = {p.key() for p in tower.gemm_problems()}
        got = {p.key() for p in tune_problems(gemms, [s], [m_bucket(m)],
                                              act_dtype=torch.bfloat16,
                                              out_dtype=torch.bfloat16, capability=None)}
        assert got == want, (got ^ want)
    if scheme == "per_tensor" and arm == "merged":
        assert any("-chs-" in k for k in want) and any("-chs-" not in k for k in want)


def test_cli_tune_poses_a_block128_group_merged_where_it_merges_exactly():
    """tune_problems follows nn/merged.py's rule: a block128 group whose members but the last
    have N a multiple of 128 merges (its key), any other runs as its members (their keys, its
    bias each); the other schemes merge every group."""
    from fp8tower.cli.tune import tune_problems
    from fp8tower.formats import Scheme, quantize_weight
    from fp8tower.nn.merged import MergeError, merge_weights

    gemms = [(256, 512, (128, 128), False), (224, 512, (128, 96), False),
             (320, 512, (96, 224), True), (64, 512, (), False)]
    merges = []
    for _, k, members, _ in gemms[:3]:
        try:
            merge_weights([quantize_weight(torch.randn(n, k), Scheme.BLOCK128) for n in members])
            merges.append(True)
        except MergeError:
            merges.append(False)
    assert merges == [True, True, False]

    def posed(scheme):
        return {(p.n, p.k, p.has_bias) for p in tune_problems(
            gemms, [scheme], [1], act_dtype=torch.bfloat16, out_dtype=torch.bfloat16,
            capability=None)}

    assert posed(Scheme.BLOCK128) == {(256, 512, False), (224, 512, False), (96, 512, True),
                                      (224, 512, True), (64, 512, False)}
    for scheme in (Scheme.PER_TENSOR, Scheme.CHANNEL_TOKEN):
        assert posed(scheme) == {(256, 512, False), (224, 512, False), (320, 512, True),
                                 (64, 512, False)}


@pytest.mark.parametrize("scheme", ["per_tensor", "channel_token", "block128"])
@pytest.mark.parametrize("merged", ["--merged", "--unmerged", None])
def test_cli_dispatch_model_lists_the_keys_tune_poses(tmp_path, scheme, merged):
    """`fp8tower dispatch --model M --merged --scheme block128` listed the shapes of merge
    groups that cannot merge exactly (tiny-hybrid's gdn_in 320+192, qkv 384+96+96: a block
    row would straddle two members), keys no model runs, and not their members', the keys
    `tune --model M --merged` poses and the model's calls look up. Now dispatch lists, per
    scheme, exactly the keys tune poses for the same options (one rule: scheme_gemms)."""
    from fp8tower.cli.tune import _gemms_from, tune_problems
    from fp8tower.formats import Scheme

    def posed(mode, schemes):
        gemms, _ = _gemms_from("tiny-hybrid", None, mode, "gdn,attention")
        return tune_problems(gemms, schemes, [1, 4], act_dtype=torch.bfloat16,
                             out_dtype=torch.bfloat16, capability=(9, 0))

    # the cache: every key tune poses for any options, and the groups' block128 keys too
    gemms, _ = _gemms_from("tiny-hybrid", None, None, "gdn,attention")
    groups = [GemmProblem(m=b, n=n, k=k, scheme="block128", capability=(9, 0), has_bias=bias)
              for n, k, members, bias in gemms if members for b in (1, 4)]
    assert groups  # tiny-hybrid has merge groups
    entries = [entry_with({"reference": 10.0}, p) for p in posed(None, list(Scheme)) + groups]
    path = tmp_path / "nvidia-h200.json"
    tcache.DecisionCache(path, tcache.environment_meta("NVIDIA H200")).save(
        {e.key: e for e in entries})

    args = ["dispatch", "--file", str(path), "--json", "--model", "tiny-hybrid",
            "--scheme", scheme] + ([merged] if merged else [])
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)["decisions"]
    listed = {r["key"] for r in rows}
    mode = {"--merged": True, "--unmerged": False, None: None}[merged]
    want = {p.key() for p in posed(mode, [Scheme.parse(scheme)])}
    assert listed == want, (listed ^ want)
    shapes = {(r["n"], r["k"]) for r in rows}
    if scheme == "block128":  # the members' (320+192, 384+96+96), never the groups'
        assert shapes == {(320, 256), (192, 256), (384, 256), (96, 256), (256, 192)}
    elif merged == "--merged":
        assert shapes == {(512, 256), (576, 256), (256, 192)}


# ----------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_real_tuning_on_gpu(tmp_path):
    from fp8tower import backends

    # Triton and cuBLASLt: a CUTLASS config missing from the disk cache is built by nvcc
    # first (~60 s: it stalled this test on the H200 machine, 2026-12-01);
    # tests/test_cutlass_backend.py covers those builds.
    d = Dispatcher(cache_dir=tmp_path, tune=True,
                   candidates=[backends.get("triton"), backends.get("cublaslt")])
    cap = torch.cuda.get_device_capability()
    p = GemmProblem(m=3, n=1024, k=5120, scheme="channel_token", capability=cap)
    tuner.tune(d, p, max_configs=2)
    b, _ = d.resolve(p)
    (entry,) = d.entries_for(p).values()
    assert b.name == entry.backend and entry.ranked()
    assert all(c.gbps > 0 for c in entry.ranked())
    assert (tmp_path / tcache.cache_file_name(torch.cuda.get_device_name())).exists()


# ----------------------------------------------------------------------------- seeded tuning


def many(clock):
    """'fast' has 6 configs: f1 best, then f2, f3 ... (f3 slower than slow's default)."""
    times = {"default": 10.0, "f1": 5.0, "f2": 6.0, "f3": 25.0, "f4": 7.0, "f5": 8.0}
    return [fake_backend("slow", clock, {"default": 20.0}), fake_backend("fast", clock, times)]


def test_sibling_buckets_are_seeded_from_the_explored_one():
    clock = FakeClock()
    timer = FakeTimer(clock)
    d = Dispatcher(candidates=many(clock), timer=timer, tune=True, persist=False)
    m1 = tuner.tune(d, cpu_problem(m=1))
    assert m1.seeded_from is None and timer.calls == 7  # 2 defaults + 5 configs
    clock.ran.clear()
    m8 = tuner.tune(d, cpu_problem(m=8))
    assert m8.seeded_from == m1.key
    # The defaults, then m1's 3 best (f1 5 us, f2 6 us, f4 7 us); f3 and f5 are not timed.
    assert clock.ran == [("slow", "default"), ("fast", "default"), ("fast", "f1"),
                         ("fast", "f2"), ("fast", "f4")]
    assert (m8.backend, m8.config["id"]) == ("fast", "f1")
    assert m8.pruned == {"fast": 2}
    # A seeded entry does not seed (M=16 is seeded from M=1, not M=8); M=32 is explored.
    assert tuner.tune(d, cpu_problem(m=16)).seeded_from == m1.key
    assert tuner.tune(d, cpu_problem(m=32)).seeded_from is None


def test_an_explored_bucket_times_the_winners_of_other_seed_groups():
    """Exploring samples MAX_CONFIGS of a backend's space; the winner of the same shape at
    an M of another seed group is timed too (search._neighbour_shortlist), once, if offered."""
    clock = FakeClock()
    times = {"default": 10.0, "f1": 9.0, "f2": 8.0, "f3": 4.0, "f4": 7.0}
    d = Dispatcher(candidates=[fake_backend("fast", clock, times)], timer=FakeTimer(clock),
                   tune=True)
    assert cfg_id(tuner.tune(d, cpu_problem(m=1)).config) == "f3"
    clock.ran.clear()
    m32 = tuner.tune(d, cpu_problem(m=32), max_configs=1)
    # the default, the one spaced sample (f1), then M = 1's winner
    assert clock.ran == [("fast", "default"), ("fast", "f1"), ("fast", "f3")]
    assert cfg_id(m32.config) == "f3" and m32.pruned == {"fast": 2}
    # a winner the sample times anyway is timed once (M = 32's f3 is f1 at max_configs 4)
    clock.ran.clear()
    tuner.tune(d, cpu_problem(m=64), max_configs=4)
    assert [c for _, c in clock.ran] == ["default", "f1", "f2", "f3", "f4"]
    # a new dispatcher reads the cached neighbours, unless retuning
    for retune, timed in ((False, True), (True, False)):
        d2 = Dispatcher(candidates=[fake_backend("fast", clock, times)],
                        timer=FakeTimer(clock), tune=True, retune=retune)
        clock.ran.clear()
        tuner.tune(d2, cpu_problem(m=32), max_configs=1)
        assert (("fast", "f3") in clock.ran) == timed
    # the neighbours are the other seed groups' entries; a winner not offered is skipped
    m1 = d.entries_for(cpu_problem(m=1))[cpu_problem(m=1).key()]
    assert tuner.neighbours_for(d, cpu_problem(m=16)) == [m32, d.entries_for(
        cpu_problem(m=64))[cpu_problem(m=64).key()]]
    only = fake_backend("fast", clock, {"default": 10.0, "f1": 9.0, "f2": 8.0})
    clock.ran.clear()
    e = search.tune_problem(cpu_problem(m=32), [only], timer=FakeTimer(clock), max_configs=1,
                            neighbours=[m1])
    assert cfg_id(e.config) == "f1" and [c for _, c in clock.ran] == ["default", "f1"]


def test_neighbours_layout_variants_are_timed_once_and_only_with_tile_major(monkeypatch):
    """Neighbours' winners may be a config and its tile-major twin: each timed once (step (4)
    skips a variant (2) timed), and neither twin with FP8TOWER_TILE_MAJOR=0."""
    from fp8tower.tuning.cache import Entry, Measurement

    clock = FakeClock()
    times = {"default": 10.0, "f1": 9.0, "f2": 8.0, "f3": 4.0, "f3_tm": 4.2}
    b = dataclasses.replace(
        fake_backend("fast", clock, times),
        configs=lambda p: [{"id": c, "block": 64} for c in ("f1", "f2", "f3")],
        layout_variants=lambda p, c: [] if c is None or c.get("packed") else
        [{**c, "id": c["id"] + "_tm", "packed": True}])

    def neighbour(m, cfg):
        return Entry(cpu_problem(m=m), "fast", cfg, "2026-12-06",
                     [Measurement("fast", cfg, 4.0, 4.0, 0.0, 1.0)])

    near = [neighbour(1, {"id": "f3", "block": 64}),
            neighbour(16, {"id": "f3_tm", "block": 64, "packed": True})]
    e = search.tune_problem(cpu_problem(m=32), [b], timer=FakeTimer(clock), max_configs=1,
                            neighbours=near)
    assert [c for _, c in clock.ran] == ["default", "f1", "f3", "f3_tm"]
    assert len(e.candidates) == 4 and cfg_id(e.config) == "f3"
    monkeypatch.setenv("FP8TOWER_TILE_MAJOR", "0")
    clock.ran.clear()
    search.tune_problem(cpu_problem(m=32), [b], timer=FakeTimer(clock), max_configs=1,
                        neighbours=near[1:])
    assert [c for _, c in clock.ran] == ["default", "f1"]


def test_full_and_retune_explore_every_bucket():
    clock = FakeClock()
    d = Dispatcher(candidates=many(clock), timer=FakeTimer(clock), tune=True)
    tuner.tune(d, cpu_problem(m=1))
    assert tuner.tune(d, cpu_problem(m=2), full=True).seeded_from is None
    # A new dispatcher retuning does not trust the cached M=1 entry as a seed...
    d2 = Dispatcher(candidates=many(clock), timer=FakeTimer(clock), tune=True, retune=True)
    assert tuner.tune(d2, cpu_problem(m=4)).seeded_from is None
    # ... but without retuning, a cached explored sibling seeds.
    d3 = Dispatcher(candidates=many(clock), timer=FakeTimer(clock), tune=True)
    assert tuner.tune(d3, cpu_problem(m=4)).seeded_from == cpu_problem(m=1).key()


def test_seeded_from_round_trips_and_old_entries_load():
    clock = FakeClock()
    d = Dispatcher(candidates=many(clock), timer=FakeTimer(clock), tune=True, persist=False)
    tuner.tune(d, cpu_problem(m=1))
    e = tuner.tune(d, cpu_problem(m=2))
    raw = e.to_json()
    back = tcache.Entry.from_json(e.key, json.loads(json.dumps(raw)))
    assert back.seeded_from == cpu_problem(m=1).key()
    del raw["seeded_from"]  # a file written before the field existed
    assert tcache.Entry.from_json(e.key, raw).seeded_from is None
    raw["seeded_from"] = 3
    with pytest.raises(tcache.EntryError, match="seeded_from"):
        tcache.Entry.from_json(e.key, raw)
    assert tcache.explain_row(e)["seeded_from"] == cpu_problem(m=1).key()


class Report:
    failures = ()

    def summary(self):
        return "built"


def test_pretune_precompiles_planned_configs_for_cuda_problems(monkeypatch):
    clock = FakeClock()
    built = []
    b = dataclasses.replace(
        fake_backend("fast", clock, {"default": 5.0, "f1": 4.0, "f2": 6.0}),
        precompile=lambda jobs: built.extend(jobs) or Report(),
        priority_configs=lambda p: [{"id": "f2", "block": 64}],
    )
    d = Dispatcher(candidates=[b], timer=FakeTimer(clock), tune=True, persist=False,
                   gpu_name="Fake GPU")
    tuned = []
    monkeypatch.setattr(tuner, "tune", lambda d, p, **kw: tuned.append(len(built))
                        or entry_with({"fast": 5.0}, p))
    tuner.pretune(d, [gpu_problem(m=1), gpu_problem(m=3), cpu_problem()], progress=False,
              max_configs=1)
    # CUDA problems only, at their buckets: default, the priority config, 1 spaced; built
    # before any tuning.
    assert [(p.m, None if c is None else c["id"]) for p, c in built] == [
        (1, None), (1, "f2"), (1, "f1"), (4, None), (4, "f2"), (4, "f1")]
    assert d.stats["precompiled_jobs"] == 6 and tuned == [6, 6, 6]
    built.clear()
    tuner.pretune(d, [gpu_problem(m=8)], progress=False, precompile=False)
    assert built == []


def test_pretune_with_progress_says_what_it_compiles(monkeypatch, capsys):
    """A cold machine's CUTLASS builds take about a minute before the first key is tuned: with
    progress on, each backend's compile phase is named on stderr (nothing when all is cached
    or progress is off)."""
    clock = FakeClock()
    b = dataclasses.replace(fake_backend("fast", clock, {"default": 5.0, "f1": 4.0}),
                            precompile=lambda jobs: Report())
    d = Dispatcher(candidates=[b], timer=FakeTimer(clock), tune=True, persist=False,
                   gpu_name="Fake GPU")
    monkeypatch.setattr(tuner, "tune", lambda d, p, **kw: entry_with({"fast": 5.0}, p))
    tuner.pretune(d, [gpu_problem(m=1)], progress=True, max_configs=1)
    err = capsys.readouterr().err
    assert "fast: compiling up to 2 configs ahead of tuning" in err
    tuner.pretune(d, [gpu_problem(m=1)], progress=False, max_configs=1)
    assert "compiling" not in capsys.readouterr().err


def test_untuned_default_follows_untuned_defers_to():
    """With nothing tuned, the safe default takes the able backend that the first one defers
    to (Triton -> cuBLASLt where its default lost), and keeps its own when that cannot serve."""
    clock = FakeClock()
    slow, fast, never = three(clock)
    slow = dataclasses.replace(
        slow, untuned_defers_to=lambda p, gpu=None: "fast" if p.m >= 32 else None)
    d = Dispatcher(candidates=[slow, fast, never], tune=False, persist=False)
    assert d.resolve(cpu_problem())[0].name == "slow"
    assert d.resolve(dataclasses.replace(cpu_problem(), m=32))[0].name == "fast"
    to_never = dataclasses.replace(slow, untuned_defers_to=lambda p, gpu=None: "never")
    d = Dispatcher(candidates=[to_never, fast, never], tune=False, persist=False)
    assert d.resolve(cpu_problem())[0] is to_never


def test_untuned_default_takes_the_backends_untuned_config_on_the_rules_gpus():
    """The safe default serves the config the chosen backend's ``untuned_config`` gives for
    this GPU (Triton on the H100 SXM: configs.small_m_deep) where the untuned rules hold; its
    ``default_config`` (None for these fakes) on other GPUs, for prefill M and for a backend
    without one."""
    clock = FakeClock()
    slow, fast, _ = three(clock)
    seen = []

    def own(p, gpu):
        seen.append((p.m, gpu))
        return f"own on {gpu}"

    slow = dataclasses.replace(slow, untuned_config=own)
    h100 = "NVIDIA H100 80GB HBM3"
    on = Dispatcher(candidates=[slow, fast], tune=False, persist=False, gpu_name=h100)
    assert on.safe_default(gpu_problem(m=3)) == (slow, f"own on {h100}")
    assert seen == [(4, h100)]  # at the bucket's M, with the GPU's name
    assert on.safe_default(gpu_problem(m=128))[1] is None  # prefill: the rules do not hold
    h200 = Dispatcher(candidates=[slow, fast], tune=False, persist=False, gpu_name="NVIDIA H200")
    assert h200.safe_default(gpu_problem())[1] == "own on NVIDIA H200"
    other = Dispatcher(candidates=[slow, fast], tune=False, persist=False, gpu_name="NVIDIA L40S")
    assert other.safe_default(gpu_problem())[1] is None and len(seen) == 2
    assert on.safe_default(cpu_problem())[1] == "own on None"  # the CPU takes the H200's
    plain = Dispatcher(candidates=[fast, slow], tune=False, persist=False, gpu_name=h100)
    assert plain.safe_default(gpu_problem())[1] is None


def test_the_hot_path_does_not_load_the_tuner():
    """nn/ imports dispatch (resolution); the tuning half loads only when a miss may tune."""
    import subprocess
    import sys

    code = ("import sys, fp8tower.nn.linear, fp8tower.nn.plan; "
            "print('fp8tower.tuning.tuner' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.split() == ["False"], out.stdout + out.stderr


def test_a_miss_that_tunes_loads_the_tuner_and_bumps_the_generation():
    clock = FakeClock()
    d = Dispatcher(candidates=three(clock), timer=FakeTimer(clock), tune=True, persist=False)
    before = dispatch.generation()
    assert d.resolve(cpu_problem())[0].name == "fast"
    assert dispatch.generation() == before + 1 and d.is_fresh(cpu_problem().key())


def test_in_context_marks_a_key_the_later_arm_re_decided_as_superseded(monkeypatch, capsys):
    """`tune --in-context` with both arms refines a key both run (the out_proj) in the
    unmerged pass, then again in the merged pass, which saves over the first decision: the
    unmerged row must not read as the choice held."""
    import fp8tower.tower.build
    import fp8tower.tower.context
    from fp8tower.cli.tune import _print_context, _refine_in_context
    from fp8tower.formats import Scheme

    class Tower:
        def __init__(self, arm):
            self.arm = arm

        def reconfigure(self, m=None):
            pass

        def gemm_problems(self):
            return []

    def refine(tower, advance=None):
        decided = {"key": "m1_n5120_k6144", "was": "a", "ms_before": 2.0, "candidates": [{}]}
        only = "m1_n6144_k5120" if tower.arm == "unmerged" else "m1_n12288_k5120"
        return [{**decided, "kept": "b" if tower.arm == "unmerged" else "c", "ms_after": 1.9},
                {**decided, "key": only, "kept": "a", "ms_after": 2.0},
                {"key": "m1_n16_k5120", "kept": "a", "candidates": [],
                 "note": "nothing to compare"}]

    monkeypatch.setattr(fp8tower.tower.build, "build_tower",
                        lambda spec, scheme, arm, **k: Tower(arm))
    monkeypatch.setattr(fp8tower.tower.context, "refine", refine)
    rows, _ = _refine_in_context(None, [Scheme.PER_TENSOR], [1], None, "gdn,attention",
                                 progress=False)
    sup = {(r["arm"], r["key"]): r.get("superseded_by") for r in rows}
    assert sup == {("unmerged", "m1_n5120_k6144"): "merged", ("merged", "m1_n5120_k6144"): None,
                   ("unmerged", "m1_n6144_k5120"): None, ("merged", "m1_n12288_k5120"): None,
                   ("unmerged", "m1_n16_k5120"): None, ("merged", "m1_n16_k5120"): None}
    _print_context(rows)
    assert "b (superseded by merged)" in capsys.readouterr().out


def test_in_context_skips_an_arm_that_cannot_be_built(monkeypatch, capsys):
    """block128 shards of N not a multiple of 128 cannot merge exactly (MergeError): tune
    poses the members' keys, and `--in-context` refines them in the unmerged arm and says
    the merged one was skipped (it raised out of the whole tune before)."""
    import fp8tower.tower.build
    import fp8tower.tower.context
    from fp8tower.cli.tune import _print_context, _refine_in_context
    from fp8tower.formats import Scheme
    from fp8tower.nn.merged import MergeError

    class Tower:
        arm = "unmerged"

        def reconfigure(self, m=None):
            pass

        def gemm_problems(self):
            return ["p"]

    def build(spec, scheme, arm, **k):
        if arm == "merged":
            raise MergeError("shard 0 has N = 320, not a multiple of 128")
        return Tower()

    monkeypatch.setattr(fp8tower.tower.build, "build_tower", build)
    monkeypatch.setattr(fp8tower.tower.context, "refine",
                        lambda tower, advance=None: [{"key": "k1", "kept": "a",
                                                      "candidates": [], "note": "x"}])
    rows, stepped = _refine_in_context(None, [Scheme.BLOCK128], [1], None, "gdn,attention",
                                       progress=False)
    assert [(r["arm"], r["key"]) for r in rows] == [("unmerged", "k1"), ("merged", "-")]
    assert stepped == ["p"]  # the built arm's problems only
    assert rows[1]["kept"] == "skipped: shard 0 has N = 320, not a multiple of 128"
    _print_context(rows)
    assert "skipped: shard 0 has N = 320" in " ".join(capsys.readouterr().out.split())
