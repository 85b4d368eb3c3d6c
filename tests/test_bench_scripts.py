"""The benchmark scripts' result files and argument checks on the CPU (the benchmarks
themselves need a GPU): default JSON names, tower_ab's up-front checks and partial writes."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name):
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"_bench_scripts_{name}", BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # a dataclass looks its module up there
    spec.loader.exec_module(mod)
    return mod


# 1. default JSON names


def test_bench_gemm_default_names_never_overwrite_an_earlier_run(tmp_path, monkeypatch):
    """Two runs of one day (one second, even) get two files; one run's partial then final
    writes go to the same file."""
    bench = _load("bench_gemm")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(bench.torch.cuda, "get_device_name", lambda *a: "NVIDIA H200")
    row = {"scheme": "per_tensor", "n": 1024, "k": 5120, "m": 1, "backend": "auto", "us": 5.0}
    common = (4400.0, {"triton_read": 4400.0}, (9, 0), ["--m", "1"])
    first = bench.write_result(None, [row], [], {}, *common, complete=True)
    second = bench.write_result(None, [row], [], {}, *common, complete=False)
    assert first != second and first.is_file() and second.is_file()
    assert json.loads(first.read_text())["complete"] is True  # the earlier run kept
    assert first.name.startswith("gemm_NVIDIA-H200_") and first.parent.name == "results"
    # the same run's final write goes where its partial one went
    assert bench.write_result(str(second), [row], [], {}, *common, complete=True) == second


def test_cli_startup_default_names_never_overwrite(tmp_path, monkeypatch):
    cli = _load("cli_startup")
    monkeypatch.setattr(cli, "REPO", tmp_path)
    monkeypatch.setattr(cli, "_once", lambda cmd: (0.1, 0.05))
    monkeypatch.setattr(cli, "_imports_torch", lambda cmd: False)
    monkeypatch.setattr(cli.provenance, "record",
                        lambda *a, **k: {"date": "2026-12-04T13:45:07+00:00"})
    assert cli.main(["--runs", "1"]) == 0
    assert cli.main(["--runs", "1"]) == 0
    got = sorted(p.name for p in (tmp_path / "benchmarks/results").iterdir())
    assert got == ["cli_startup_cpu_2026-12-04.json", "cli_startup_cpu_2026-12-04_134507.json"]
    explicit = tmp_path / "x.json"
    cli.main(["--runs", "1", "--json", str(explicit)])
    assert explicit.is_file()  # an explicit --json is used as given


# 2. tower_ab: schemes and M checked up front, rows written after each scheme


@pytest.mark.parametrize("script", ["bench_standin", "bench_prefetch_depth"])
@pytest.mark.parametrize(("opt", "bad", "says"), [
    ("--schemes", "per_tensor,per_tensr", "'per_tensr'"),
    ("--m", "1,x", "'x' is not a positive integer M"),
    ("--m", "1,0", "'0' is not a positive integer M"),
])
def test_bad_schemes_or_m_are_refused_before_any_timing(script, opt, bad, says):
    bench = _load(script)
    with pytest.raises(SystemExit) as e:
        bench.main([opt, bad, "--json", "unused.json"])
    assert opt in str(e.value) and says in str(e.value)


def test_bench_override_and_prepass_group_check_m_up_front():
    for script, extra in (("bench_override", ["--arms", "cached"]), ("bench_prepass_group", [])):
        with pytest.raises(SystemExit) as e:
            _load(script).main(["--m", "1,x", *extra, "--json", "unused.json"])
        assert "'x' is not a positive integer M" in str(e.value)


def test_run_arms_checks_before_timing_and_writes_after_each_scheme(tmp_path, monkeypatch):
    import torch

    ab = _load("tower_ab")
    timed = []

    class Tower:
        static_y = torch.zeros(2)

        def reconfigure(self, m):
            pass

    def build(model, scheme, arm, backend, m):
        if scheme == "block128":
            raise RuntimeError("out of memory")
        return Tower()

    monkeypatch.setattr(ab, "build_tower", build)
    monkeypatch.setattr(ab, "time_tower", lambda tower, replays, steps: (
        timed.append(1), type("T", (), {"ms_per_step": 2.0})())[1])
    monkeypatch.setattr(ab.dispatch, "reset", lambda: None)
    monkeypatch.setattr(ab.torch.cuda, "empty_cache", lambda: None)
    with pytest.raises(SystemExit, match="per_tensr"):
        ab.run_arms("m", ["per_tensor", "per_tensr"], [1], ["a"], lambda a: None, 1, 1, 1)
    with pytest.raises(SystemExit, match="'x'"):
        ab.run_arms("m", ["per_tensor"], [1, "x"], ["a"], lambda a: None, 1, 1, 1)
    assert not timed  # nothing timed before the refusal
    out = tmp_path / "ab.json"
    with pytest.raises(RuntimeError):
        ab.run_arms("m", ["per_tensor", "channel_token", "block128"], [1, 8], ["a", "b"],
                    lambda a: None, 1, 1, 1, json_path=str(out))
    doc = json.loads(out.read_text())
    assert doc["complete"] is False
    assert [(r["scheme"], r["m"]) for r in doc["rows"]] == [
        ("per_tensor", 1), ("per_tensor", 8), ("channel_token", 1), ("channel_token", 8)]


# 3. cold-L2 labels


def test_small_weights_rotate_partly_warm_and_lose_their_ceiling_fraction():
    common = _load("_common")
    l2 = 60 * 2**20
    assert common.l2_rotation(5120 * 6144, l2) == (7, True)
    copies, cold = common.l2_rotation(512 * 1024, l2)  # 0.5 MB x 256 copies < 3 x L2
    assert (copies, cold) == (256, False)
    t = type("T", (), {"median_us": 2.0, "min_us": 1.9, "spread": 0.01})()
    warm = common.timing_fields(t, 4000, 4000.0, copies, cold)
    assert warm["cold"] is False and warm["copies"] == 256 and warm["pct_ceiling"] is None
    assert common.pct_cell(warm) == "warm"
    assert common.timing_fields(t, 4000, 4000.0, 6, True)["pct_ceiling"] == 0.1


def test_fourway_rows_record_the_rotation(monkeypatch):
    from test_tuning import FakeClock, FakeTimer, cpu_problem, fake_backend

    bench = _load("bench_fourway")
    monkeypatch.setattr(bench, "l2_rotation", lambda nbytes, l2: (256, False))
    clock = FakeClock()
    fast = fake_backend("fast", clock, {"default": 10.0})
    rows = bench.measure(cpu_problem(m=4), [fast], None, FakeTimer(clock), max_configs=2,
                         ceiling=1000.0)
    assert rows[0]["copies"] == 256 and rows[0]["cold"] is False
    assert rows[0]["pct_ceiling"] is None
    import io

    from rich.console import Console
    console = Console(file=io.StringIO(), width=200)
    console.print(bench.table(rows, "fake GPU", 1000.0))
    assert "warm" in console.file.getvalue()


def test_chain_rows_give_no_ceiling_fraction_when_warm(monkeypatch):
    """Audit: bench_chain's per-GEMM and chain rows gave % of the ceiling also when the
    rotation was capped below 3 x L2 (partly warm); they now say cold or not, and None."""
    chain = _load("bench_chain")
    t = type("T", (), {"median_us": 2.0})()
    monkeypatch.setattr(chain, "time_cuda_graph", lambda make, copies, replays: t)
    monkeypatch.setattr(chain, "l2_cache_bytes", lambda: 60 * 2**20)
    cold = chain.timed_gemm(None, 7, 4_000_000, 4000.0, cold=True)
    assert cold["cold"] and cold["pct_ceiling"] == 50.0 and cold["beyond_bytes_us"] == 1.0
    warm = chain.timed_gemm(None, 256, 4_000_000, 4000.0, cold=False)
    assert not warm["cold"] and warm["pct_ceiling"] is None and warm["beyond_bytes_us"] is None
    p = type("P", (), {"n": 512, "k": 1024, "bytes_moved": lambda self: 4000})()
    row = chain.time_arm(lambda *a: None, "base", p, [None] * 256, None, None, 256, 4000.0)
    assert row["cold"] is False and row["pct_ceiling"] is None  # 0.5 MB x 256 < 3 x 60 MB
    b = chain.beyond_bytes(4.0, 4_000_000, 4000.0, True, per=2)
    assert b == {"cold": True, "pct_ceiling": 25.0, "beyond_bytes_us_per_gemm": 1.5}


def test_tower_chain_gets_weight_sets_past_three_l2():
    chain = _load("bench_chain")
    l2 = 60 * 2**20
    shapes = [(1024, 5120), (5120, 6144)]  # 36.7 MB a set: 2 sets would be warm
    n_sets = chain.chain_weight_sets(shapes, l2)
    assert n_sets * sum(n * k for n, k in shapes) > 3 * l2 and n_sets == 6
    sets = {s: [f"w{s}{i}" for i in range(n_sets)] for s in shapes}
    seen = []
    calls = chain.chain_calls(lambda arm, p, w, x, out: seen.append(w) or (lambda: None),
                              "base", chain.Scheme.PER_TENSOR, 1, shapes, sets,
                              {5120: None, 6144: None}, {s: None for s in shapes}, (9, 0), False)
    assert len(calls) == n_sets * len(shapes) and len(set(seen)) == n_sets * len(shapes)


# 5. cache_evidence


def test_cache_evidence_keeps_distinct_keys_apart_and_reads_gzip(tmp_path, capsys):
    import gzip

    ev = _load("cache_evidence")

    def entry(m, chs, cfg):
        p = {"m": m, "n": 1024, "k": 5120, "scheme": "channel_token",
             "channel_weight_scale": chs}
        c = {"backend": "triton", "config": cfg, "error": None, "median_us": 1.0}
        return {"problem": p, "backend": "triton", "config": cfg, "candidates": [c]}

    entries = {"m1_n1024_k5120_channel_token_sm90": entry(1, False, {"b": 1}),
               "m8_n1024_k5120_channel_token_sm90": entry(8, False, {"b": 1}),
               "m1_n1024_k5120_channel_token-chs_sm90": entry(1, True, {"b": 2}),
               "m8_n1024_k5120_channel_token-chs_sm90": entry(8, True, {"b": 2})}
    got = ev.same_winner_m1_16(entries)
    assert got["groups"] == 2 and got["same"] == 2  # merged, the two keys would differ
    path = tmp_path / "cache.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump({"meta": {}, "entries": entries}, f)
    out = tmp_path / "ev.json"
    ev.main([str(path), "--out", str(out)])
    assert json.loads(out.read_text())["same_winner_m1_16"]["groups"] == 2


@pytest.mark.parametrize("args, says", [
    (["--schemes", "block128"], "times per_tensor and channel_token"),
    (["--schemes", "per_tensr"], "--schemes:"),
    (["--m", "1,x"], "'x' is not a positive integer M"),
    (["--m", "0"], "'0' is not a positive integer M"),
    (["--shapes", "4096"], "expected NxK"),
    (["--shapes", "5120xK"], "expected NxK"),
])
def test_bench_cutlass_refuses_bad_values_before_any_work(args, says):
    """A block128 run built every config and measured the read ceiling before its weights
    (per-channel scales) raised; bad numbers were tracebacks. Now one line, first thing."""
    bench = _load("bench_cutlass")
    with pytest.raises(SystemExit, match=re.escape(says)):
        bench.main(args)


def test_cublaslt_glue_old_wrapper_matches_the_backend_on_cpu():
    """bench_cublaslt_glue.py's `glue` arm (the wrapper as it was) and the backend as it is
    give the same bits: per_tensor with a scale per channel and a static x scale, through
    torch._scaled_mm's CPU build (block-wise has no CPU build)."""
    import torch

    from fp8tower import backends
    from fp8tower.formats import Fp8Weight, Scheme

    glue = _load("bench_cublaslt_glue")
    g = torch.Generator().manual_seed(0)
    data = torch.randn(64, 96, generator=g).to(torch.float8_e4m3fn)
    w = Fp8Weight(data, torch.rand(64, generator=g) + 0.01, Scheme.PER_TENSOR,
                  torch.tensor(0.02))
    be = backends.get("cublaslt")
    for m in (1, 5):
        x = torch.randn(m, 96, generator=g).bfloat16()
        old = glue._old_run(x, w, be.prepare(w), torch.bfloat16)
        new = be.run(x, w, be.prepare(w), out_dtype=torch.bfloat16)
        assert old.shape == (m, 64) and torch.equal(old, new), m


def test_prebuild_packs_each_library_with_its_build_record(tmp_path):
    """prebuild_cutlass.pack: every .so of the cache and its .json build record where there
    is one (the record is what tests/test_cutlass_backend.py's build test reads on a cache
    hit; an archive of the libraries alone failed it, session 67), nothing else."""
    import tarfile

    cache = tmp_path / "cutlass"
    cache.mkdir()
    for name in ("pf_64x16x128-aa.so", "pf_64x16x128-aa.json", "bp_64x16x128-bb.so",
                 "stray.txt"):
        (cache / name).write_text(name)
    out = tmp_path / "run" / "prebuilt.tar.xz"
    built = _load("prebuild_cutlass").pack(cache, out)
    assert [p.name for p in built] == ["bp_64x16x128-bb.so", "pf_64x16x128-aa.so"]
    with tarfile.open(out) as t:
        assert sorted(t.getnames()) == ["cutlass/bp_64x16x128-bb.so",
                                        "cutlass/pf_64x16x128-aa.json",
                                        "cutlass/pf_64x16x128-aa.so"]
        assert t.extractfile("cutlass/pf_64x16x128-aa.json").read() == b"pf_64x16x128-aa.json"


def _prebuilt_run(tmp_path):
    """RUN with a prebuilt.tar.xz holding cutlass/lib.so ("built"), as
    benchmarks/prebuild_cutlass.py writes it; skips without bash or xz."""
    import shutil
    import tarfile

    if shutil.which("bash") is None or shutil.which("xz") is None:
        pytest.skip("needs bash and xz")
    run, src = tmp_path / "run", tmp_path / "src"
    (src / "cutlass").mkdir(parents=True)
    (src / "cutlass" / "lib.so").write_text("built")
    run.mkdir()
    with tarfile.open(run / "prebuilt.tar.xz", "w:xz") as t:
        t.add(src / "cutlass", arcname="cutlass")
    return run


def test_unpack_prebuilt_fills_each_cache_dir_and_skips_when_not_carried(tmp_path):
    """device_wheels.sh's unpack_prebuilt: RUN/prebuilt.tar.xz into every directory given
    (made if missing); without the tarball nothing happens and the script goes on."""
    import shutil
    import subprocess

    run = _prebuilt_run(tmp_path)
    a, b = tmp_path / "a", tmp_path / "b" / "deep"

    def call(run_dir):
        script = (f'. "{BENCH}/device_wheels.sh" && '
                  f'unpack_prebuilt "{run_dir}" "{a}" "{b}" && echo ok')
        return subprocess.run(["bash", "-c", script], capture_output=True, text=True,
                              check=False)

    out = call(run)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    assert (a / "cutlass" / "lib.so").read_text() == (b / "cutlass" / "lib.so").read_text() \
        == "built"
    shutil.rmtree(a)
    out = call(tmp_path / "missing")
    assert out.returncode == 0 and out.stdout.strip() == "ok" and not a.exists()


def test_cold_cache_empties_each_dir_before_unpacking(tmp_path):
    """device_wheels.sh's cold_cache: a tuning cache left by an earlier call on a warm machine
    is removed before the prebuilt libraries are unpacked (session 56's call 6 tuned nothing
    on call 3's leftovers); a directory that did not exist is made."""
    import subprocess

    run = _prebuilt_run(tmp_path)
    warm, new = tmp_path / "warm", tmp_path / "new"
    warm.mkdir()
    (warm / "nvidia-h100-80gb-hbm3.json").write_text("{}")
    script = f'. "{BENCH}/device_wheels.sh" && cold_cache "{run}" "{warm}" "{new}" && echo ok'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
    for d in (warm, new):
        assert sorted(p.name for p in d.iterdir()) == ["cutlass"], d
        assert (d / "cutlass" / "lib.so").read_text() == "built"


def _fake_device_bin(tmp_path, rc=3):
    """A PATH directory of stand-ins: ``date +%s`` reads a clock file (starting at 1000),
    ``timeout`` logs its arguments and runs the rest, ``python3`` logs its arguments and
    environment, moves the clock 7 s on and exits ``rc`` (``-c``: 1 at once)."""
    fake, clock = tmp_path / "bin", tmp_path / "clock"
    fake.mkdir()
    clock.write_text("1000")
    scripts = {
        "date": f'#!/usr/bin/env bash\ncat "{clock}"\n',
        "timeout": f'#!/usr/bin/env bash\necho "timeout $*" >> "{tmp_path}/calls"\n'
                   'shift 3\nexec "$@"\n',
        # python3 -c: pytest_par's import check (no xdist here)
        "python3": f'#!/usr/bin/env bash\n[ "$1" = -c ] && exit 1\necho "args: $*"; '
                   'echo "env: $FP8TOWER_TUNE $FP8TOWER_CACHE_DIR"\n'
                   'echo "slower than cuBLASLt by > 2%: a cell"; echo "1 passed"\n'
                   f'echo $(( $(cat "{clock}") + 7 )) > "{clock}"\nexit {rc}\n',
    }
    for name, text in scripts.items():
        (fake / name).write_text(text)
        (fake / name).chmod(0o755)
    return fake


def _bash(tmp_path, body):
    import subprocess

    fake = _fake_device_bin(tmp_path)
    script = f'. "{BENCH}/device_wheels.sh" && PATH="{fake}:$PATH" && {body}'
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False,
                          cwd=str(tmp_path))


def test_device_budget_helpers_and_bench_untuned(tmp_path):
    """device_wheels.sh's budget_start / left / lim (a step's timeout: the smaller of its own
    and what is left less 5 s, at least 1) and bench_untuned (bench_gemm.py untuned under
    that timeout, its status line appended to DIR/status.txt), on a stand-in clock."""
    import shutil

    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    out = _bash(tmp_path, 'budget_start 100 && echo "$(lim 30) $(lim 200) $(left)" && '
                          'budget_start 3 && echo "$(lim 10)" && budget_start 60 && '
                          f'bench_untuned "{tmp_path}" cells 20 --m 1 && echo "$(left)"')
    lines = out.stdout.splitlines()
    assert out.returncode == 0 and lines[:2] == ["30 95 100", "1"], (out.stdout, out.stderr)
    assert lines[2] == "cells rc=3 left=53" and "a cell" in lines[3], lines  # 7 s went by
    assert lines[-1] == "53"
    assert (tmp_path / "status.txt").read_text() == "cells rc=3 left=53\n"
    assert (tmp_path / "calls").read_text().startswith("timeout -k 10 20 python3 ")
    log = (tmp_path / "cells.log").read_text()
    assert "benchmarks/bench_gemm.py --m 1 --precompile --replays 10 --rounds 3 --json" in log
    assert "env: 0 /tmp/un" in log and str(tmp_path / "cells.json") in log


def test_gpu_suite_with_left(tmp_path):
    """device_wheels.sh's gpu_suite_with_left: the GPU tests within what is left less 10 s,
    into DIR/suite.log; with a minute or less left nothing runs, said in DIR/status.txt."""
    import shutil

    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    out = _bash(tmp_path, f'budget_start 200 && gpu_suite_with_left "{tmp_path}"')
    assert out.returncode == 0 and out.stdout.splitlines()[0] == "gpu suite rc=3 left=193", out
    call = (tmp_path / "calls").read_text()
    assert call.startswith("timeout -k 10 190 python3 -m pytest -q -m gpu ") and \
        "--tb=short" in call, call
    assert "1 passed" in (tmp_path / "suite.log").read_text()
    short = tmp_path / "short"
    short.mkdir()
    out = _bash(short, f'budget_start 70 && gpu_suite_with_left "{short}"')
    assert out.returncode == 0 and out.stdout.startswith("gpu suite skipped: 60s left"), out
    assert (short / "status.txt").read_text() == "gpu suite skipped: 60s left\n"
    assert not (short / "suite.log").exists() and not (short / "calls").exists()


def test_left_without_budget_start_says_so(tmp_path):
    """``left`` before ``budget_start`` is an error that names it, not a silent 1 s limit."""
    import shutil
    import subprocess

    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    out = subprocess.run(["bash", "-c", f'. "{BENCH}/device_wheels.sh" && left'],
                         capture_output=True, text=True, check=False)
    assert out.returncode != 0 and "call budget_start first" in out.stderr


def test_device_setup(tmp_path):
    """device_wheels.sh's device_setup RUN DIR: DIR made, RUN's wheels installed into
    /tmp/site (a failure said in DIR/status.txt), no prebuilt CUTLASS unpacked where none was
    carried, PYTHONPATH on the checkout's src and /tmp/site."""
    import shutil

    if shutil.which("bash") is None:
        pytest.skip("needs bash")
    run, out_dir = tmp_path / "run", tmp_path / "out" / "next"
    (run / "whl").mkdir(parents=True)
    (run / "whl" / "a-1-py3-none-any.whl").write_text("")
    out = _bash(tmp_path, f'HOME="{tmp_path}" && device_setup "{run}" "{out_dir}" && '
                          'echo "path: $PYTHONPATH $PYTHONUNBUFFERED"')
    assert out.returncode == 0, out
    assert "-m pip install" in out.stdout and "--target /tmp/site" in out.stdout, out.stdout
    assert out.stdout.splitlines()[-1] == f"path: {tmp_path}/src:/tmp/site 1", out.stdout
    assert (out_dir / "status.txt").read_text() == "wheel install failed\n"  # python3 rc 3
    assert not (tmp_path / ".cache").exists()  # no prebuilt.tar.xz carried
