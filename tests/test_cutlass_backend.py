"""The cutlass backend on the CPU: availability reasons, problem checks, configs, the build
cache key, the dispatch plumbing, and (with nvcc + nvidia-cutlass) one real sm_90a build."""

from __future__ import annotations

import ctypes
import dataclasses
import json
import time

import pytest
import torch
from test_tuning import FakeClock, FakeTimer, entry_with
from typer.testing import CliRunner

from fp8tower import backends
from fp8tower.backends import cutlass
from fp8tower.problem import GemmProblem
from fp8tower.tuning import cache as tcache
from fp8tower.tuning import search as tsearch


def sm90(m=8, n=10240, k=5120, scheme="per_tensor", **kw) -> GemmProblem:
    return GemmProblem(m=m, n=n, k=k, scheme=scheme, capability=(9, 0), **kw)


# ----------------------------------------------------------------------------- availability


def test_registered_after_cublaslt_with_a_reason_when_unavailable():
    names = backends.names()
    assert "cutlass" in names and names.index("cublaslt") < names.index("cutlass")
    b = backends.get("cutlass")
    reason = b.unavailable_reason()
    if not torch.cuda.is_available():
        assert reason is not None and reason  # a CPU machine never has it available


def test_build_reasons_name_the_missing_piece(monkeypatch):
    monkeypatch.setattr(cutlass, "cutlass_root", lambda: None)
    assert "nvidia-cutlass" in cutlass.build_unavailable()
    assert "nvidia-cutlass" in cutlass.BACKEND.unavailable_reason()
    monkeypatch.undo()
    monkeypatch.setattr(cutlass, "cutlass_root", lambda: cutlass.SOURCE.parent)  # present
    monkeypatch.setattr(cutlass, "cutlass_version", lambda: "4.2.0.0")
    monkeypatch.setattr(cutlass, "nvcc_path", lambda: None)
    assert "nvcc" in cutlass.build_unavailable()
    with pytest.raises(cutlass.CutlassError, match="nvcc"):
        cutlass.library_path(cutlass.BuildSpec("sk", 128, 16))


def test_explicit_request_names_the_reason():
    if torch.cuda.is_available():
        pytest.skip("CPU behaviour")
    with pytest.raises(backends.BackendError, match="cannot serve .*cutlass|'cutlass' cannot"):
        backends.require("cutlass", sm90())


@pytest.mark.parametrize(
    "problem, match",
    [
        (GemmProblem(8, 1024, 5120, "per_tensor"), "CUDA tensor"),
        (GemmProblem(8, 1024, 5120, "per_tensor", capability=(8, 9)), "sm_90a only, this is sm_89"),
        (sm90(scheme="weight_only"), "not weight_only"),
        (sm90(out_dtype=torch.float16), "bfloat16 only"),
        (sm90(n=1000), "N=1000"),
        (sm90(k=5000), "K=5000"),
    ],
)
def test_check_reasons(problem, match):
    assert match in cutlass.BACKEND.check(problem)


@pytest.mark.parametrize("scheme", ["per_tensor", "channel_token", "block128"])
def test_check_serves_tower_shapes(scheme):
    assert cutlass.BACKEND.check(sm90(m=3, scheme=scheme)) is None
    assert cutlass.BACKEND.check(sm90(scheme=scheme, channel_weight_scale=scheme == "per_tensor")) is None


# ----------------------------------------------------------------------------- configs


@pytest.mark.parametrize("m, tn", [(1, 16), (8, 16), (16, 16), (17, 32), (32, 32), (64, 64)])
def test_configs_use_the_token_tile_of_the_bucket(m, tn):
    cfgs = cutlass.BACKEND.configs(sm90(m=m))
    assert cutlass.BACKEND.default_config(sm90(m=m)) in cfgs
    assert {cutlass.spec_of(c).tile_n for c in cfgs} == {tn}
    assert {c["sched"] for c in cfgs} == {"sk", "pp", "pf"}
    for c in cfgs:  # JSON round trip: what the tuning cache stores finds the same config
        assert tsearch.native_config(cutlass.BACKEND, sm90(m=m), tcache.normalize_config(c)) == (True, c)
    # PDL only where the build has griddepcontrol (see fp8_gemm.cu)
    assert all(cutlass._GDC[c["sched"]] for c in cfgs if c["pdl"])


@pytest.mark.parametrize("m, tn", [(1, 16), (32, 32), (64, 64)])
def test_block128_runs_the_blockwise_schedules_only(m, tn):
    """block128 gets the blockwise-scaled builds (bp, bk) and nothing else; the other schemes
    never get them; split-K 2/3/4 where the 128-row tiles leave SMs idle (N = 5120: 40)."""
    p = sm90(m=m, n=5120, k=6144, scheme="block128")
    cfgs = cutlass.BACKEND.configs(p)
    assert {c["sched"] for c in cfgs} == {"bp", "bk"}
    assert sorted(c["splits"] for c in cfgs if c["mode"] == "splitk") == [2, 3, 4]
    assert cutlass.BACKEND.default_config(p) in cfgs
    assert all(cutlass.spec_of(c).tile_n == tn for c in cfgs)
    assert all(cutlass._GDC[c["sched"]] for c in cfgs if c["pdl"])
    for c in cfgs:
        assert tsearch.native_config(cutlass.BACKEND, p, tcache.normalize_config(c)) == (True, c)
    for scheme in ("per_tensor", "channel_token"):
        scheds = {c["sched"] for c in cutlass.BACKEND.configs(sm90(m=m, scheme=scheme))}
        assert not scheds & cutlass.BLOCKWISE


def test_block128_scales_repeat_to_64_rows():
    """Row r of the expanded scales is the 128-row block scale of weight rows 64r..64r+63,
    down to a partial last block (N = 1040: 9 blocks of 128, 17 groups of 64)."""
    from fp8tower.formats import quantize_weight

    w = quantize_weight(torch.randn(1040, 384) * 0.02, "block128")
    s128 = w.kernel_scale()
    s64 = cutlass.block_scales_64(w)
    assert s128.shape == (9, 3) and s64.shape == (17, 3) and s64.is_contiguous()
    for r in range(17):
        torch.testing.assert_close(s64[r], s128[r // 2], rtol=0, atol=0)
    assert cutlass._prepare(w)["w_scale"].data_ptr() != s128.data_ptr()


def test_a_blockwise_config_never_runs_another_scheme_and_vice_versa():
    from fp8tower.formats import quantize_weight

    x = torch.randn(2, 256).bfloat16()
    for scheme, cfg in (("block128", {"sched": "pf", "tile": "64x16x128"}),
                        ("per_tensor", {"sched": "bp", "tile": "64x16x128"})):
        w = quantize_weight(torch.randn(128, 256) * 0.02, scheme,
                            act_scale=0.02 if scheme == "per_tensor" else None)
        with pytest.raises(cutlass.CutlassError, match="block128 runs the blockwise"):
            cutlass._run(x, w, cutlass._prepare(w), config=cfg)


def test_kernel_family_matches_what_the_h200_trace_showed():
    """Every kernel name a profiler recorded for each config on the H200 (2026-11-30) matches
    kernel_family, and cuBLASLt's family does not claim our GEMM kernels."""
    import re
    from pathlib import Path

    path = Path(__file__).parents[1] / "benchmarks" / "results" / "cutlass_H200_2026-11-30.json"
    seen = json.loads(path.read_text())["kernel_names"]
    names = {n for v in seen.values() for n in v["kernels"]}
    assert any("fp8tower_cutlass::pf_64x16x128" in n for n in names)
    assert all(re.search(cutlass.BACKEND.kernel_family, n) for n in names)
    ours = [n for n in names if "device_kernel" in n]
    assert not any(re.search(r"nvjet|xmma|cublas|splitKreduce", n) for n in ours)


def test_split_k_only_when_tiles_leave_sms_idle():
    small = [c["splits"] for c in cutlass.BACKEND.configs(sm90(n=1024)) if c["mode"] == "splitk"]
    big = [c["splits"] for c in cutlass.BACKEND.configs(sm90(n=34816)) if c["mode"] == "splitk"]
    assert small == [2, 4] and big == []


def test_build_spec_names_and_rejects_unknown_schedules():
    s = cutlass.BuildSpec("pf", 64, 32)
    assert s.name == "pf_64x32x128" and "-DFP8T_SCHED=3" in s.defines()
    assert "-DCUTLASS_ENABLE_GDC_FOR_SM90" in s.defines()
    assert "-DCUTLASS_ENABLE_GDC_FOR_SM90" not in cutlass.BuildSpec("sk", 128, 16).defines()
    assert "-DFP8T_SCHED=4" in cutlass.BuildSpec("bp", 64, 16).defines()
    assert "-DCUTLASS_ENABLE_GDC_FOR_SM90" not in cutlass.BuildSpec("bk", 128, 16).defines()
    with pytest.raises(ValueError, match="unknown CUTLASS schedule 'xx'"):
        cutlass.BuildSpec("xx", 64, 16)


def test_a_cluster_is_named_and_defined_only_when_it_is_more_than_one_cta():
    """cluster 1 keeps the name and -D flags of the builds before clusters (their keys move
    only with the source); 2 and 4 are new kernels that multicast x."""
    plain = cutlass.BuildSpec("pf", 64, 32)
    assert cutlass.spec_of({"sched": "pf", "tile": "64x32x128"}) == plain
    assert cutlass.spec_of({"sched": "pf", "tile": "64x32x128", "cluster": 1}) == plain
    assert not any(d.startswith("-DFP8T_CM") for d in plain.defines())
    c2 = cutlass.spec_of({"sched": "pf", "tile": "64x32x128", "cluster": 2})
    assert c2.name == "pf_64x32x128_c2" and "-DFP8T_CM=2" in c2.defines()
    assert "-DFP8T_KERNEL=pf_64x32x128_c2" in c2.defines()
    with pytest.raises(ValueError, match="cluster size 3: expected one of 1, 2, 4"):
        cutlass.BuildSpec("pf", 64, 32, 128, 3)


# ----------------------------------------------------------------------------- build cache


def test_build_key_covers_source_config_nvcc_and_cutlass():
    s = cutlass.BuildSpec("sk", 128, 16)
    base = {"source": "src", "nvcc_ver": "release 13.0, V13.0.88", "cutlass_ver": "4.2.0.0"}
    k = cutlass.build_key(s, **base)
    assert k == cutlass.build_key(s, **base) and len(k) == 16
    others = [
        cutlass.build_key(cutlass.BuildSpec("sk", 128, 32), **base),
        cutlass.build_key(cutlass.BuildSpec("pp", 128, 16), **base),
        cutlass.build_key(cutlass.BuildSpec("sk", 128, 16, 128, 2), **base),
        cutlass.build_key(s, **{**base, "source": "src2"}),
        cutlass.build_key(s, **{**base, "nvcc_ver": "release 12.8, V12.8.93"}),
        cutlass.build_key(s, **{**base, "cutlass_ver": "4.1.0"}),
        cutlass.build_key(s, **base, env_flags="NVCC_APPEND_FLAGS=-G"),
    ]
    assert len({k, *others}) == 8


def test_cache_dir_follows_the_tuning_cache_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path / "c"))
    assert cutlass.cache_dir() == tcache.default_cache_dir() / "cutlass"
    monkeypatch.delenv("FP8TOWER_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert cutlass.cache_dir() == tcache.default_cache_dir() / "cutlass"


def test_cache_metadata_records_the_cutlass_version():
    meta = tcache.environment_meta(None)
    assert meta["cutlass"] == (cutlass.cutlass_version() or "none")
    assert "cutlass" in tcache.meta_mismatch({**meta, "cutlass": "0.0"}, meta)


def test_nvcc_failure_is_a_one_line_cutlass_error(monkeypatch, tmp_path):
    if cutlass.build_unavailable():
        pytest.skip(cutlass.build_unavailable())
    monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path))
    bad = tmp_path / "bad.cu"
    bad.write_text("#error fp8tower test\n")
    monkeypatch.setattr(cutlass, "SOURCE", bad)
    with pytest.raises(cutlass.CutlassError, match=r"nvcc failed to build CUTLASS config sk_128x16x128.*fp8tower test"):
        cutlass.build(cutlass.BuildSpec("sk", 128, 16))
    assert not list((tmp_path / "cutlass").glob("*.so"))  # no half-written library left


@pytest.mark.slow
def test_one_config_builds_for_sm90a_and_is_reused(monkeypatch, tmp_path, request):
    """One real nvcc build (the default config of M <= 16), into the disk cache: the one of
    FP8TOWER_CACHE_DIR when set (a kept cache makes a later run a cache hit), else a fresh
    temporary one (CI today: one build per run, ~30-60 s).
    Measured 2026-11-30, nvcc 13.0, CUTLASS 4.2.0, -O3, 2 cores shared with other jobs: this
    test (pf_64x16x128) 62 s wall, 34 s CPU, 3.6 GB peak RSS; sk_128x16x128 alone 88 s wall
    (42 s CPU); two builds side by side 48-49 s each at low load, 195-210 s at load 9."""
    reason = cutlass.build_unavailable()
    if reason:
        pytest.skip(reason)
    import os

    if not os.environ.get("FP8TOWER_CACHE_DIR"):
        monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path))
    spec = cutlass.spec_of(cutlass.BACKEND.default_config(sm90(m=8)))
    t0 = time.perf_counter()
    path = cutlass.build(spec)
    first = time.perf_counter() - t0
    meta = json.loads(path.with_suffix(".json").read_text())
    assert meta["config"] == spec.name and meta["cutlass"] == cutlass.cutlass_version()
    request.node.user_properties.append(("build_s", meta["seconds"]))
    print(f"\n{spec.name}: built in {meta['seconds']} s (this call {first:.1f} s)")
    mtime = path.stat().st_mtime_ns
    t0 = time.perf_counter()
    assert cutlass.build(spec) == path and path.stat().st_mtime_ns == mtime  # cache hit
    assert time.perf_counter() - t0 < 5
    lib = ctypes.CDLL(str(path))  # loads without a GPU (cudart is static)
    lib.fp8t_config.restype = ctypes.c_char_p
    assert lib.fp8t_config().decode() == spec.name
    assert hasattr(lib, "fp8t_gemm") and hasattr(lib, "fp8t_workspace_size")


def test_a_cluster_config_builds_for_sm90a(monkeypatch, tmp_path):
    """A 2-CTA cluster (x multicast) compiles: pf_64x32x128_c2, 40 s on 2 cores (session 70;
    ws, pp and sk with 2 and pf with 4 built too). Its kernel is named for its cluster."""
    reason = cutlass.build_unavailable()
    if reason:
        pytest.skip(reason)
    import os

    if not os.environ.get("FP8TOWER_CACHE_DIR"):
        monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path))
    spec = cutlass.spec_of({"sched": "pf", "tile": "64x32x128", "cluster": 2})
    lib = ctypes.CDLL(str(cutlass.build(spec)))
    lib.fp8t_config.restype = ctypes.c_char_p
    assert lib.fp8t_config().decode() == "pf_64x32x128_c2"


# ----------------------------------------------------------------------------- dispatch


def test_tuner_times_every_cutlass_config_and_the_winner_round_trips():
    clock = FakeClock()
    p = sm90(m=8, n=1024)
    times = {c["sched"] + str(c["splits"]): 10.0 + i for i, c in enumerate(cutlass.BACKEND.configs(p))}
    times["sk4"] = 5.0  # split-K 4 wins

    def run(x, weight, packed, *, act_scale, bias, out_dtype, config):
        clock.now += times[config["sched"] + str(config["splits"])]
        return torch.zeros(x.shape[0], weight.n, dtype=out_dtype)

    fake = dataclasses.replace(cutlass.BACKEND, unavailable_reason=lambda: None, run=run,
                               prepare=lambda w: None)
    e = tsearch.tune_problem(p, [fake], timer=FakeTimer(clock), device=torch.device("cpu"),
                            max_configs=16)
    assert len(e.candidates) == len(cutlass.BACKEND.configs(p)) and e.backend == "cutlass"
    assert e.config["splits"] == 4 and e.config["mode"] == "splitk"
    assert tsearch.native_config(cutlass.BACKEND, p, e.config)[0]
    assert cutlass.spec_of(e.config) in {cutlass.spec_of(c) for _, c in
                                          [(p, c) for c in tsearch.planned_configs(p, cutlass.BACKEND, 16)]}


def test_dispatch_explain_shows_cutlass_candidates(tmp_path):
    from fp8tower.cli.tune import app

    p = sm90(m=4, n=1024)
    e = entry_with({"cublaslt": 8.0}, p)
    cfg = tcache.normalize_config(cutlass.BACKEND.configs(p)[1])
    e.candidates.append(tcache.Measurement("cutlass", cfg, 6.0, 6.0, 0.0, 1.0))
    e.backend, e.config = "cutlass", cfg
    path = tmp_path / "nvidia-h200.json"
    tcache.DecisionCache(path, tcache.environment_meta("NVIDIA H200")).save({e.key: e})
    res = CliRunner().invoke(app, ["dispatch", "--file", str(path), "--explain"])
    assert res.exit_code == 0, res.output
    assert "cutlass[" in res.output and "sched=sk" in res.output


def test_precompile_builds_each_distinct_config_once(monkeypatch):
    built = []
    monkeypatch.setattr(cutlass, "library_path", lambda s: cutlass.SOURCE.parent / "missing.so")
    monkeypatch.setattr(cutlass, "build", lambda s: built.append(s.name))
    p1, p8 = sm90(m=1, n=1024), sm90(m=8, n=1024)
    jobs = [(p, c) for p in (p1, p8) for c in tsearch.planned_configs(p, cutlass.BACKEND, 16)]
    report = cutlass.BACKEND.precompile(jobs)
    assert sorted(built) == ["pf_64x16x128", "pp_64x16x128", "sk_128x16x128"]
    assert report.failures == [] and "3 CUTLASS configs" in report.summary()


@pytest.mark.parametrize("todo, cpus, avail_gib, want", [
    (9, 16, 128, 9),   # one wave on the H200's host (it was half the CPUs: 8, two waves)
    (20, 16, 128, 16),  # a core a build
    (9, 16, 13, 3),    # memory for three builds at 4 GiB each
    (9, 16, 2, 1),     # never none
    (0, 16, 128, 1),
])
def test_build_workers_use_every_cpu_within_memory(monkeypatch, todo, cpus, avail_gib, want):
    from fp8tower.backends import nvcc

    monkeypatch.setattr(nvcc.os, "sched_getaffinity", lambda pid: set(range(cpus)))
    monkeypatch.setattr(nvcc, "_available_memory", lambda: avail_gib << 30)
    assert nvcc.build_workers(todo) == want


def test_available_memory_reads_proc_meminfo(tmp_path, monkeypatch):
    from fp8tower.backends import nvcc

    info = tmp_path / "meminfo"
    info.write_text("MemTotal:  1000 kB\nMemFree:  10 kB\nMemAvailable:  500 kB\n")
    real_open = open
    monkeypatch.setattr("builtins.open", lambda p, *a, **k: real_open(
        info if p == "/proc/meminfo" else p, *a, **k))
    assert nvcc._available_memory() == 500 * 1024


def test_info_lists_the_cutlass_backend_and_versions():
    from fp8tower.cli import app

    res = CliRunner().invoke(app, ["info"])
    assert res.exit_code == 0, res.output
    assert "cutlass" in res.output and "nvcc" in res.output


# ----------------------------------------------------------------------------- workspaces


def test_a_grown_workspace_keeps_the_old_one_alive(monkeypatch):
    """A CUDA graph captured with a workspace keeps its raw pointer (passed through ctypes):
    growing it must not free the old buffer (replays would write freed memory)."""
    import weakref

    monkeypatch.setattr(cutlass, "_WORKSPACES", {})
    monkeypatch.setattr(cutlass, "_RETIRED", [])
    dev = torch.device("cpu")
    a = cutlass._workspace(dev, 1 << 20)
    ref = weakref.ref(a)
    del a  # _run holds it for one call only
    b = cutlass._workspace(dev, 4 << 20)
    assert ref() is not None and ref().data_ptr() != b.data_ptr()
    assert cutlass._workspace(dev, 4 << 20) is b  # reused while large enough
    # grows at least twice as large: a few retired buffers at most
    assert cutlass._workspace(dev, (4 << 20) + 1).numel() == 8 << 20
    assert cutlass._workspace(dev, 0) is None


def test_workspaces_are_per_stream():
    """Two streams running CUTLASS at once must not share a workspace (they would race)."""
    dev = torch.device("cpu")
    s1 = cutlass._workspace(dev, 1024, stream=111)
    s2 = cutlass._workspace(dev, 1024, stream=222)
    assert s1.data_ptr() != s2.data_ptr() and cutlass._workspace(dev, 1024, stream=111) is s1


# ----------------------------------------------------------------------------- run (mocked)


class FakeLib:
    """fp8t_gemm on the CPU: records its arguments and (``write``) stores bf16 1.0 into the
    M x N contiguous D it is handed, as the GEMM would."""

    def __init__(self, write=True):
        self.calls, self.write = [], write

    def fp8t_workspace_size(self, m, n, k, splits, mode):
        return 4096 if splits > 1 else 0

    def fp8t_last_error(self):
        return b"fake"

    def fp8t_gemm(self, w, x, y, ws, wvec, xs, xvec, m, n, k, splits, mode, overlap, prefetch,
                  pdl, workspace, ws_bytes, stream):
        self.calls.append({"w": w, "x": x, "y": y, "xs": xs, "xvec": xvec, "m": m, "k": k,
                           "workspace": workspace, "stream": stream})
        if xvec:  # what the epilogue / blockwise mainloop reads: the flat row-major scales
            cols = -(-k // 128) if self.kb else 1
            flat = (ctypes.c_float * (m * cols)).from_address(xs)
            self.calls[-1]["xs_read"] = torch.tensor(list(flat)).reshape(m, cols)
        if self.write:
            d = (ctypes.c_uint16 * (m * n)).from_address(y)
            for i in range(m * n):
                d[i] = 0x3F80
        return 0

    kb = False


@pytest.fixture
def fake_lib(monkeypatch):
    lib = FakeLib()
    monkeypatch.setattr(cutlass, "library", lambda spec: lib)
    cutlass._workspace_bytes.cache_clear()
    monkeypatch.setattr(torch.cuda, "current_stream",
                        lambda device=None: type("S", (), {"cuda_stream": 7}))
    yield lib
    cutlass._workspace_bytes.cache_clear()


def _fp8(scheme, m=3, n=256, k=384, seed=0):
    from fp8tower.formats import quantize_activation, quantize_weight

    g = torch.Generator().manual_seed(seed)
    w = quantize_weight(torch.randn(n, k, generator=g) * 0.02, scheme,
                        act_scale=0.02 if scheme == "per_tensor" else None)
    q, s = quantize_activation(torch.randn(m, k, generator=g), w.scheme, w.act_scale)
    return w, q, s


PF = {"sched": "pf", "tile": "64x16x128", "mode": "heuristic", "splits": 1, "pdl": True}
BP = {"sched": "bp", "tile": "64x16x128", "mode": "heuristic", "splits": 1, "pdl": True}


@pytest.mark.parametrize(("out", "match"), [
    (torch.empty(3, 256, dtype=torch.float16), r"got \(3, 256\) torch.float16"),  # raw bf16 bits
    (torch.empty(3, 256, dtype=torch.float32), r"got \(3, 256\) torch.float32"),
    (torch.empty(2, 256, dtype=torch.bfloat16), r"got \(2, 256\)"),  # written past its end
    (torch.empty(3, 128, dtype=torch.bfloat16), r"got \(3, 128\)"),
])
def test_out_of_the_wrong_dtype_or_shape_is_refused(monkeypatch, fake_lib, out, match):
    fake_lib.write = False  # (before this check, a smaller out was written past its end)
    w, q, s = _fp8("per_tensor")
    with pytest.raises(ValueError, match=r"out must be \(3, 256\) bfloat16, " + match):
        cutlass._run(q, w, cutlass._prepare(w), act_scale=s, config=PF, out=out)
    assert not fake_lib.calls


def test_misaligned_x_and_out_go_through_aligned_buffers(fake_lib):
    """TMA needs 16-byte aligned bases; CUTLASS's check is an assert compiled out by
    -DNDEBUG (a zeroed descriptor). x.contiguous() keeps a misaligned contiguous view."""
    w, q, s = _fp8("per_tensor")
    buf = torch.zeros(3 * 384 + 64, dtype=torch.uint8)
    off = (16 - buf.data_ptr() % 16) % 16 + 1
    x = buf[off:off + 3 * 384].view(3, 384).view(q.dtype)
    x.copy_(q)
    obuf = torch.zeros(3 * 256 + 16, dtype=torch.bfloat16)
    ooff = (16 - obuf.data_ptr() % 16) % 16 // 2 + 1
    out = obuf[ooff:ooff + 3 * 256].view(3, 256)
    assert x.data_ptr() % 16 and out.data_ptr() % 16 and x.is_contiguous() and out.is_contiguous()
    y = cutlass._run(x, w, cutlass._prepare(w), act_scale=s, config=PF, out=out)
    call = fake_lib.calls[-1]
    assert call["x"] % 16 == 0 and call["y"] % 16 == 0 and call["y"] != out.data_ptr()
    assert y is out and bool((out == 1).all())


def test_aligned_contiguous_out_is_written_directly(fake_lib):
    w, q, s = _fp8("per_tensor")
    out = torch.zeros(3, 256, dtype=torch.bfloat16)
    assert cutlass._run(q, w, cutlass._prepare(w), act_scale=s, config=PF, out=out) is out
    assert fake_lib.calls[-1]["y"] == out.data_ptr() and bool((out == 1).all())


def test_a_misaligned_weight_is_copied_at_prepare():
    w, _, _ = _fp8("per_tensor")
    from fp8tower.formats import Fp8Weight

    buf = torch.zeros(256 * 384 + 64, dtype=torch.uint8)
    off = (16 - buf.data_ptr() % 16) % 16 + 1
    data = buf[off:off + 256 * 384].view(256, 384).view(w.data.dtype)
    data.copy_(w.data)
    odd = Fp8Weight(data, w.scale, w.scheme, w.act_scale)
    packed = cutlass._prepare(odd)["w"]
    assert packed.data_ptr() % 16 == 0 and torch.equal(packed.view(torch.uint8),
                                                       w.data.view(torch.uint8))


def test_block128_scales_of_fp8_x_are_checked_and_read_row_major(fake_lib):
    fake_lib.kb = True
    w, q, s = _fp8("block128")
    col = s.t().contiguous().t()
    cutlass._run(q, w, cutlass._prepare(w), act_scale=col, config=BP)
    torch.testing.assert_close(fake_lib.calls[-1]["xs_read"], s, rtol=0, atol=0)
    with pytest.raises(ValueError, match=r"shape \(3, 3\), one per token and 128 of K.*\(9,\)"):
        cutlass._run(q, w, cutlass._prepare(w), act_scale=s.reshape(-1), config=BP)


def test_a_0dim_channel_token_scale_with_several_tokens_is_refused(fake_lib):
    w, q, _ = _fp8("channel_token")
    with pytest.raises(ValueError, match=r"shape \(3,\) or \(3, 1\).*got shape \(\)"):
        cutlass._run(q, w, cutlass._prepare(w), act_scale=torch.tensor(0.5), config=PF)
    assert not fake_lib.calls


def test_split_k_uses_the_streams_workspace(fake_lib, monkeypatch):
    monkeypatch.setattr(cutlass, "_WORKSPACES", {})
    w, q, s = _fp8("per_tensor")
    sk = {"sched": "sk", "tile": "128x16x128", "mode": "splitk", "splits": 2, "pdl": False}
    cutlass._run(q, w, cutlass._prepare(w), act_scale=s, config=sk)
    assert fake_lib.calls[-1]["workspace"] == cutlass._WORKSPACES[("cpu", None, 7)].data_ptr()


# ----------------------------------------------------------------------------- kernel family


@pytest.mark.parametrize("name", [
    ("void cutlass::device_kernel<fp8tower_cutlass::sk_128x16x128>("
    "fp8tower_cutlass::sk_128x16x128::Params)"),
    "device_kernel",  # nsys shortName of the same
    "Memset (Device)", "_fp8_act_quant_kernel",
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::"
    "func_wrapper_t<float, at::native::MaxNanFunctor<float> >, unsigned int, float, 4, 4> >(...)"),
    "void at::native::vectorized_elementwise_kernel<4, at::native::AbsFunctor<float>, ...>(...)",
    ("void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
    "CUDAFunctor_add<c10::BFloat16> >(...)"),  # the bias add
    "void at::native::vectorized_elementwise_kernel<4, at::native::float8_copy_kernel_cuda(...)",
])
def test_kernel_family_matches_what_the_backend_launches(name):
    assert cutlass.BACKEND.kernel_regex().search(name)


@pytest.mark.parametrize("name", [
    ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, at::native::MeanOps<"
    "float, float, float, float>, unsigned int, float, 4, 4> >(...)"),  # a norm
    ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, "
    "float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(...)"),
    "void at::native::index_elementwise_kernel<128, 4, ...>",
    "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<...> >(...)",  # not ours
    "nvjet_tst_64x8_64x16_4x1_v_bz_TNT", "fp8t_stream_gemm", "_fp8_gemm_decode_kernel",
    "vectorized_elementwise_kernel", "reduce_kernel", "my_device_kernel_v2",
])
def test_kernel_family_does_not_match_unrelated_kernels(name):
    assert not cutlass.BACKEND.kernel_regex().search(name)


# ----------------------------------------------------------------------------- build cache


def test_build_compiles_the_text_it_hashed(tmp_path, monkeypatch):
    """nvcc read SOURCE itself after the key was hashed: an edit in between was cached under
    the old text's key. (The fake nvcc copies its .cu to the output, after editing SOURCE.)"""
    import sys

    nvcc = tmp_path / "nvcc"
    nvcc.write_text(
        f"#!{sys.executable}\n"
        "import os, pathlib, sys\n"
        "if '--version' in sys.argv:\n"
        "    print('Cuda compilation tools, release 13.0, V13.0.88'); sys.exit(0)\n"
        "pathlib.Path(os.environ['FAKE_NVCC_EDIT']).write_text('// edited\\n')\n"
        "src = next(a for a in sys.argv[1:] if a.endswith('.cu'))\n"
        "out = pathlib.Path(sys.argv[sys.argv.index('-o') + 1])\n"
        "out.write_text(pathlib.Path(src).read_text())\n")
    nvcc.chmod(0o755)
    src = tmp_path / "fp8_gemm.cu"
    src.write_text("// original\n")
    monkeypatch.setenv("FP8TOWER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("FAKE_NVCC_EDIT", str(src))
    monkeypatch.setattr(cutlass, "SOURCE", src)
    monkeypatch.setattr(cutlass, "nvcc_path", lambda: str(nvcc))
    monkeypatch.setattr(cutlass, "cutlass_root", lambda: tmp_path)
    monkeypatch.setattr(cutlass, "cutlass_version", lambda: "4.2.0.0")
    spec = cutlass.BuildSpec("pf", 64, 16)
    path = cutlass.build(spec)
    assert path.read_text() == "// original\n" and src.read_text() == "// edited\n"
    assert path == cutlass.library_path(spec, "// original\n") != cutlass.library_path(spec)
    keys = {cutlass.library_path(spec)}
    for var in ("NVCC_APPEND_FLAGS", "NVCC_PREPEND_FLAGS"):
        monkeypatch.setenv(var, "-lineinfo")
        keys.add(cutlass.library_path(spec))
    assert len(keys) == 3
