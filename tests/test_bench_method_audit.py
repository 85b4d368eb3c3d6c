"""The benchmarks time as the measurement method says: findings of the 2026-12-06 audit, each
test failing on the code before it. CPU only: timers, towers and GPUs are faked."""

from __future__ import annotations

import contextlib
import dataclasses
import statistics
import subprocess
from types import SimpleNamespace

import pytest
import torch
from test_bench_scripts import _load
from test_tuning import FakeClock, cpu_problem, fake_backend

from fp8tower import provenance
from fp8tower.tuning import search as tsearch
from fp8tower.tuning import timer as ttimer
from fp8tower.tuning.timer import Timing

# ------------------------------------------------------------------ tuner chain: x writers


def _fake_cuda_timer(monkeypatch, clock):
    """time_cuda_graph as it runs on a GPU, its CUDA calls faked: the calls' fake time from
    the capture's start to its end is what every replay takes."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    stream = SimpleNamespace(wait_stream=lambda s: None)
    monkeypatch.setattr(torch.cuda, "Stream", lambda: stream)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda: stream)
    monkeypatch.setattr(torch.cuda, "stream", lambda s: contextlib.nullcontext())
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    captured = []

    @contextlib.contextmanager
    def capture(graph, **kw):
        start = clock.now
        yield
        captured.append(clock.now - start)

    monkeypatch.setattr(ttimer.graph_edges, "new_graph", lambda: SimpleNamespace(
        replay=lambda: None))
    monkeypatch.setattr(ttimer.graph_edges, "capture", capture)
    monkeypatch.setattr(ttimer, "event_times_ms",
                        lambda fn, repeats: [captured[-1] / 1e3] * repeats)


@pytest.mark.parametrize("copies", [37, 3, 4])  # 37 and 33 calls: odd; 32: even
def test_the_chain_subtracts_the_writers_its_graph_holds(monkeypatch, copies):
    """The x writers' count ran on from the warm-up into the capture: at 37 copies (37 calls,
    37 warm-up calls) the graph held 19 writers and 18.5 were subtracted (10.054 us for a
    10 us GEMM). Now the count restarts at the capture and the writers it holds are taken
    off: 10 us exactly, odd or even."""
    clock = FakeClock()
    _fake_cuda_timer(monkeypatch, clock)
    be = fake_backend("a", clock, {"default": 10.0})
    x, act, ws = tsearch.tuning_operands(cpu_problem(), torch.device("cpu"), copies)

    def write_x():
        clock.now += 4.0

    writer = ttimer.time_cuda_graph(lambda i: write_x, copies).median_us
    assert writer == pytest.approx(4.0)
    chain = tsearch.Chain(x, act, ws, torch.bfloat16, ttimer.time_cuda_graph, write_x,
                          base_us=writer / tsearch.WRITE_X_EVERY)
    assert chain.time(be, None).median_us == pytest.approx(10.0)


# ------------------------------------------------------------------ provenance: the code


def test_record_names_the_commit_and_the_package_code(monkeypatch):
    """Results carried no git commit: now the commit, whether the tree differs from it, and
    a hash of every package source (the kernel-code hash, what tuning caches match, is not
    widened: any edit would invalidate every cache)."""
    rec = provenance.record(["x"], gpu_name=None)
    assert len(rec["package_code"]) == 16 and rec["package_code"] != rec["kernels"]
    assert rec["git_dirty"] in (True, False, None)
    head = subprocess.run(["git", "-C", str(provenance.Path(provenance.__file__).parent),
                           "rev-parse", "HEAD"], capture_output=True, text=True,
                          check=False)
    if head.returncode == 0:  # this checkout (not an installed copy)
        assert rec["git_commit"] == head.stdout.strip()
    assert "package_code" not in provenance.versions(None)
    assert "git_commit" not in provenance.versions(None)
    pytest.importorskip("transformers")
    from fp8tower.hf import generate

    gen = generate.provenance("test", torch.device("cpu"))
    assert {k: gen[k] for k in ("git_commit", "package_code")} == {
        k: rec[k] for k in ("git_commit", "package_code")}


def test_git_state_is_none_without_git_or_a_checkout(monkeypatch, tmp_path):
    def no_git(*a, **k):
        raise FileNotFoundError("git")

    monkeypatch.setattr(provenance.subprocess, "run", no_git)
    assert provenance.git_state() == {"git_commit": None, "git_dirty": None}
    monkeypatch.undo()
    # an installed copy: its folder is no checkout's (a plain folder here)
    src = tmp_path / "fp8tower"
    src.mkdir()
    (src / "provenance.py").write_text("a")
    monkeypatch.setattr(provenance, "__file__", str(src / "provenance.py"))
    assert provenance.git_state() == {"git_commit": None, "git_dirty": None}


def test_git_state_of_a_checkout(monkeypatch, tmp_path):
    """A repository where the package's sources are tracked: its commit, and dirty when a
    file changed (or one is untracked: git status --porcelain)."""
    repo = tmp_path / "repo"
    src = repo / "src" / "fp8tower"
    src.mkdir(parents=True)
    (src / "provenance.py").write_text("a")
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t", "HOME": str(tmp_path), "PATH": "/usr/bin:/bin"}

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], env=env, check=True,
                              capture_output=True, text=True).stdout.strip()

    try:
        git("init", "-q")
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("no git here")
    monkeypatch.setattr(provenance, "__file__", str(src / "provenance.py"))
    assert provenance.git_state() == {"git_commit": None, "git_dirty": None}  # untracked
    git("add", ".")
    git("commit", "-qm", "one")
    assert provenance.git_state() == {"git_commit": git("rev-parse", "HEAD"), "git_dirty": False}
    (src / "provenance.py").write_text("b")
    assert provenance.git_state()["git_dirty"] is True


def test_package_code_covers_every_source_and_kernel_code_does_not_widen(monkeypatch,
                                                                          tmp_path):
    src = tmp_path / "fp8tower"
    for f in ("kernels/k.py", "cli/c.py", "dispatch.py"):
        (src / f).parent.mkdir(parents=True, exist_ok=True)
        (src / f).write_text("a")
    monkeypatch.setattr(provenance, "__file__", str(src / "provenance.py"))
    for fn in (provenance.kernel_code, provenance.package_code):
        fn.cache_clear()
    try:
        kernels, package = provenance.kernel_code(), provenance.package_code()
        (src / "cli" / "c.py").write_text("b")  # not timing code
        for fn in (provenance.kernel_code, provenance.package_code):
            fn.cache_clear()
        assert provenance.kernel_code() == kernels and provenance.package_code() != package
    finally:
        monkeypatch.undo()
        for fn in (provenance.kernel_code, provenance.package_code):
            fn.cache_clear()


# ------------------------------------------------------------------ bench_gemm


def _gemm():
    return _load("bench_gemm")


def test_gemm_arms_time_the_default_at_the_buckets_m(monkeypatch):
    """Named backends and variants timed default_config at the call's M, while dispatch
    serves it at the bucket's (Dispatcher.resolve): per_tensor 10240x5120 M = 17 timed
    BLOCK_K 128 split 3 without the pre-pass, dispatch serves BLOCK_K 256 split 2 with it."""
    from fp8tower.formats import Scheme
    from fp8tower.kernels import configs as kc
    from fp8tower.problem import GemmProblem

    bench = _gemm()
    p = GemmProblem(17, 10240, 5120, Scheme.PER_TENSOR, capability=(9, 0),
                    static_act_scale=True)
    at = dataclasses.replace(p, m=32)
    assert kc.default_config(p) != kc.default_config(at)  # the case at hand
    clock = FakeClock()
    seen = []
    fake = dataclasses.replace(fake_backend("triton", clock, {"default": 1.0}),
                               default_config=lambda q: seen.append(q.m) or kc.default_config(q))
    monkeypatch.setattr(bench.backends, "get", lambda name: fake)
    _, cfg, _ = bench.arm_choice("triton", p, None)
    assert cfg == kc.default_config(at) and seen == [32]
    assert cfg == _dispatch_default(fake, p)
    assert bench.arm_choice("nodeep", p, None)[1] == kc.default_config(at, deep=False)
    assert bench.arm_choice("pair", p, None)[1] == bench.variant_config("pair", at)


def _dispatch_default(be, p):
    """What dispatch serves where ``be`` is asked for by name (its default)."""
    from fp8tower.dispatch import Dispatcher

    return Dispatcher(candidates=[be], tune=False, persist=False).resolve(p, be)[1]


class _Chain:
    """Chain.time faked: each arm's time from ``times`` plus a drift of ``drift`` us a call,
    the order of the calls kept."""

    def __init__(self, times, drift=0.0):
        self.times, self.drift, self.order = times, drift, []

    def time(self, be, cfg):
        t = self.times[be.name] + self.drift * len(self.order)
        self.order.append(be.name)
        return Timing(median_us=t, min_us=t - 0.1, max_us=t + 0.1, replays=20, calls=32)


def test_gemm_cell_resolves_every_arm_then_times_rounds_abba(monkeypatch):
    """Each cell was timed once, arm after arm in a fixed order, and ``auto`` resolved (so
    tuned) between the arms it is compared with. Now every choice first, then rounds in
    ABBA order; a row is the median of its rounds, its ratio to cuBLASLt the median of the
    per-round ratios: under a drift of 0.5 us a timing two equal arms come out equal, where
    a fixed order made the first 5% faster in every round."""
    bench = _gemm()
    clock = FakeClock()
    arms = {n: fake_backend(n, clock, {"default": 1.0}) for n in ("cublaslt", "triton")}
    monkeypatch.setattr(bench.backends, "get", arms.__getitem__)
    chain = _Chain({"cublaslt": 10.0, "triton": 10.0}, drift=0.5)
    events = []

    def resolve(q, how, graph=False):
        assert not chain.order, "auto resolved after a timing"
        events.append("auto")
        return arms["triton"], None

    monkeypatch.setattr(bench.dispatch, "resolve", resolve)
    rows = bench.time_cell(["cublaslt", "auto"], cpu_problem(m=4), chain, None, rounds=4,
                           row={"m": 4})
    assert events == ["auto"]
    assert chain.order == ["cublaslt", "triton", "triton", "cublaslt"] * 2
    lt, auto = rows
    assert lt["us_rounds"] == [10.0, 11.5, 12.0, 13.5]
    assert auto["us_rounds"] == [10.5, 11.0, 12.5, 13.0]
    assert lt["us"] == auto["us"] == 11.75 and auto["chosen"] == "triton"
    assert auto["m"] == 4 and auto["config"] is None
    want = statistics.median([10 / 10.5, 11.5 / 11.0, 12 / 12.5, 13.5 / 13.0])
    assert bench.cublaslt_speedup(lt, auto) == pytest.approx(want) == pytest.approx(1, abs=2e-3)
    assert bench.cublaslt_speedup({"us": 10.0}, {"us": 8.0}) == 1.25  # rows without rounds


def test_gemm_cell_records_an_error_and_goes_on(monkeypatch):
    bench = _gemm()
    clock = FakeClock()
    arms = {n: fake_backend(n, clock, {"default": 1.0}) for n in ("cublaslt", "triton")}
    monkeypatch.setattr(bench.backends, "get", arms.__getitem__)

    class Failing(_Chain):
        def time(self, be, cfg):
            if be.name == "triton":
                self.order.append("x")
                raise RuntimeError("out of shared memory")
            return super().time(be, cfg)

    chain = Failing({"cublaslt": 10.0})
    said = []
    rows = bench.time_cell(["triton", "cublaslt"], cpu_problem(m=4), chain, None, rounds=3,
                           report=said.append)
    assert rows[0]["error"] == "RuntimeError: out of shared memory" and "us" not in rows[0]
    assert chain.order.count("x") == 1 and rows[1]["us_rounds"] == [10.0, 10.0, 10.0]
    assert len(said) == 1


def test_gemm_cell_error_line_keeps_an_override_arm_and_brackets(monkeypatch):
    """The error line goes through rich: an override arm's "[num_stages=5]" and brackets in
    the error's text are escaped, not read as markup (dropped, or a MarkupError)."""
    from rich.console import Console

    bench = _gemm()
    clock = FakeClock()
    arms = {"triton": dataclasses.replace(fake_backend("triton", clock, {"default": 1.0}),
                                          default_config=lambda q: {"num_stages": 4})}
    monkeypatch.setattr(bench.backends, "get", arms.__getitem__)

    class Failing(_Chain):
        def time(self, be, cfg):
            assert cfg == {"num_stages": 5}
            raise ValueError("smem [/x] over 227 KB")

    said = []
    bench.time_cell(["triton[num_stages=5]"], cpu_problem(m=4), Failing({}), None,
                    report=said.append)
    console = Console(record=True, width=200)
    console.print(said[0])
    text = console.export_text()
    assert "triton[num_stages=5] channel_token" in text and "smem [/x] over 227 KB" in text


def test_gemm_cudnn_rows_record_the_plan_run(monkeypatch):
    """A cuDNN plan that does not build at this M was replaced by the next that does: the
    row labelled plan 1 timed plan 2. The row now says which plan ran."""
    from fp8tower.backends import cudnn as cudnn_backend

    bench = _gemm()
    clock = FakeClock()
    be = fake_backend("cudnn", clock, {"default": 1.0})
    be = dataclasses.replace(be, default_config=lambda q: {"plan": 1})
    monkeypatch.setattr(bench.backends, "get", lambda name: be)
    entry = cudnn_backend.GraphEntry(graph=None, n_plans=4,
                                     built={0: None, 1: "no", 2: None, 3: None})
    monkeypatch.setattr(cudnn_backend, "_graph", lambda problem, dev: entry)
    monkeypatch.setattr(cudnn_backend, "_build_plan", lambda e, i, dev: e.built[i])
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    assert cudnn_backend.plan_run(cpu_problem(m=4), {"plan": 1}) == 2
    assert cudnn_backend.plan_run(cpu_problem(m=4), {"plan": 3}) == 3
    rows = bench.time_cell(["cudnn"], cpu_problem(m=4), _Chain({"cudnn": 5.0}), None)
    assert rows[0]["config"] == {"plan": 1} and rows[0]["plan_run"] == 2


def test_gemm_rounds_option(tmp_path):
    import json

    bench = _gemm()
    with pytest.raises(SystemExit, match="--rounds: 0 is not a positive integer"):
        bench.main(["--rounds", "0"])
    row = {"scheme": "per_tensor", "n": 1024, "k": 5120, "m": 1, "backend": "auto", "us": 5.0}
    path = bench.write_result(str(tmp_path / "g.json"), [row], [], {}, 4400.0, {}, (9, 0),
                              ["--rounds", "5"], complete=True, rounds=5)
    doc = json.loads(path.read_text())
    assert doc["rounds"] == 5 and "median of per-round" in doc["units"]["speedup_vs_cublaslt"]


# ------------------------------------------------------------------ tower A/B scripts


def test_tower_ab_reverses_the_arm_order_every_other_round(monkeypatch):
    """A,B,A,B: a linear drift favoured A. Now A,B,B,A (as tower/context.py)."""
    ab = _load("tower_ab")
    order = []

    class Tower:
        static_y = torch.zeros(2)

        def reconfigure(self, m):
            pass

    monkeypatch.setattr(ab, "build_tower", lambda *a, **k: Tower())
    monkeypatch.setattr(ab, "time_tower", lambda tower, replays, steps: SimpleNamespace(
        ms_per_step=1.0 + 0.1 * len(order)))
    monkeypatch.setattr(ab.dispatch, "reset", lambda: None)
    monkeypatch.setattr(ab.torch.cuda, "empty_cache", lambda: None)
    rows = ab.run_arms("m", ["per_tensor"], [1], ["a", "b"], order.append, 4, 1, 1)
    assert order == ["a", "b", "b", "a", "a", "b", "b", "a"]
    arms = rows[0]["arms"]  # drift 0.1 a timing: the medians come out equal
    assert arms["a"]["ms"] == pytest.approx(arms["b"]["ms"])


def test_early_launch_reverses_off_on_every_other_round(monkeypatch):
    bench = _load("bench_early_launch")
    order = []

    def time_tower(tower, replays, steps, early):
        order.append(early)
        return SimpleNamespace(ms_per_step=1.0 + 0.1 * len(order))

    monkeypatch.setattr(bench, "time_tower", time_tower)
    monkeypatch.setattr(bench, "programmatic_edges", lambda tower: {})
    tower = SimpleNamespace(static_y=torch.zeros(2))
    times, outs, _ = bench.time_off_on(tower, 4, 8, 20)
    assert order == [False, True, True, False, False, True, True, False] and outs[True] is not None
    assert statistics.median(times[False]) == pytest.approx(statistics.median(times[True]))


# ------------------------------------------------------------------ generate: arm order


def _fake_lives(monkeypatch, generate, arms_ms):
    """build_arm and eager_round faked: each arm's eager round takes its ms plus a drift."""
    order = []

    def build(model, arm, **kw):
        res = generate.GenerateResult(arm, kw["batch"], kw["context"], kw["steps"])
        res.logits_finite = True
        return generate._Live(res, step=object(), tok=0, pos=0)

    def eager(live, device):
        order.append(("eager", live.res.arm))
        live.rounds_ms.append(arms_ms[live.res.arm] + 0.5 * len(order))

    monkeypatch.setattr(generate, "build_arm", build)
    monkeypatch.setattr(generate, "eager_round", eager)
    return order


def test_generate_eager_rounds_reverse_every_other_round(monkeypatch):
    pytest.importorskip("transformers")
    from fp8tower.hf import generate

    order = _fake_lives(monkeypatch, generate, {"fp8:per_tensor": 10.0, "bf16": 10.0})
    res = generate.run_arms("tiny", ["bf16", "fp8:per_tensor"], batch=1, context=4, steps=2,
                            rounds=4, device=torch.device("cpu"), backend="reference",
                            graph=False, interleave=True)
    arms = [a for _, a in order]  # bf16 built (and so timed) last
    assert arms == ["fp8:per_tensor", "bf16", "bf16", "fp8:per_tensor"] * 2
    assert res[0].eager_ms == pytest.approx(res[1].eager_ms)  # the drift cancels


def test_generate_graph_rounds_alternate_and_take_the_median_replay(monkeypatch):
    """One event pair over ``steps`` replays (a mean), arm after arm: now every arm captured
    first, then rounds of replays each timed alone, ABBA; graph_ms the median replay."""
    pytest.importorskip("transformers")
    from fp8tower.hf import generate

    order = _fake_lives(monkeypatch, generate, {"fp8:per_tensor": 10.0, "bf16": 20.0})
    replay = {"fp8:per_tensor": [1.0, 1.0, 9.0], "bf16": [2.0, 2.0, 2.0]}

    def capture(step, tok, pos, warm):
        arm = next(a for a, s in steps.items() if s is step)
        order.append(("capture", arm))
        return arm

    def replays(captured, n):
        order.append(("graph", captured))
        return replay[captured][:n]

    monkeypatch.setattr(generate, "_capture_decode", capture)
    monkeypatch.setattr(generate, "_replays_ms", replays)
    steps = {}
    real_build = generate.build_arm

    def build(model, arm, **kw):
        live = real_build(model, arm, **kw)
        steps[arm] = live.step = object()
        return live

    monkeypatch.setattr(generate, "build_arm", build)
    res = generate.run_arms("tiny", ["bf16", "fp8:per_tensor"], batch=1, context=4, steps=3,
                            rounds=3, device=torch.device("cuda"), backend="reference",
                            graph=True, interleave=True)
    graph = [e for e in order if e[0] != "eager"]
    assert graph == [("capture", "fp8:per_tensor"), ("capture", "bf16"),
                     ("graph", "fp8:per_tensor"), ("graph", "bf16"),
                     ("graph", "bf16"), ("graph", "fp8:per_tensor"),
                     ("graph", "fp8:per_tensor"), ("graph", "bf16")]
    by = {r.arm: r for r in res}
    assert by["fp8:per_tensor"].graph_ms == 1.0  # the median replay, not the mean (3.67)
    assert by["fp8:per_tensor"].graph_rounds_ms == [1.0, 1.0, 1.0]
    assert by["bf16"].graph_ms == 2.0 and by["bf16"].graph_tok_s == 500.0


def test_generate_graph_rounds_go_on_past_an_arm_out_of_memory(monkeypatch):
    """Every arm's graph is held at once: one that does not fit beside the others gets a
    note and no graph time, the others are timed (a review, 2026-12-06)."""
    pytest.importorskip("transformers")
    from fp8tower.hf import generate

    _fake_lives(monkeypatch, generate, {"fp8:per_tensor": 10.0, "bf16": 20.0})
    steps = {}
    real_build = generate.build_arm

    def build(model, arm, **kw):
        live = real_build(model, arm, **kw)
        live.tok = torch.zeros(1)
        steps[arm] = live.step = object()
        return live

    def capture(step, tok, pos, warm):
        arm = next(a for a, s in steps.items() if s is step)
        if arm == "bf16":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory")
        return arm

    monkeypatch.setattr(generate, "build_arm", build)
    monkeypatch.setattr(generate, "_capture_decode", capture)
    monkeypatch.setattr(generate, "_replays_ms", lambda captured, n: [1.0] * n)
    res = generate.run_arms("tiny", ["bf16", "fp8:per_tensor"], batch=1, context=4, steps=3,
                            rounds=2, device=torch.device("cuda"), backend="reference",
                            graph=True, interleave=True)
    by = {r.arm: r for r in res}
    assert by["fp8:per_tensor"].graph_ms == 1.0
    assert by["bf16"].graph_ms is None and by["bf16"].eager_ms is not None
    assert any("out of memory capturing it" in n for n in by["bf16"].notes)
