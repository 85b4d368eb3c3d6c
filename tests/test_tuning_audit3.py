"""The tuning cache and dispatch, session 35's audit: each test fails on the code before it
(fake backends and timers, tests/test_tuning.py)."""

from __future__ import annotations

import ast
import dataclasses
import json
import os
import stat
import warnings

import pytest
from test_tuning import FakeClock, FakeTimer, cpu_problem, fake_backend

from fp8tower import env, paths
from fp8tower.dispatch import Dispatcher
from fp8tower.tuning import cache as tcache
from fp8tower.tuning import search as tsearch


def _pools(clock):
    slow = fake_backend("slow", clock, {"default": 20.0})
    fast = fake_backend("fast", clock, {"default": 10.0, "f1": 6.0})
    return slow, fast


def test_an_entry_tuned_over_a_restricted_pool_is_retuned_by_a_wider_one(tmp_path):
    """A process with FP8TOWER_BACKENDS=slow saved its choice to the shared file, and every
    later process with the full pool served it without timing `fast`."""
    clock = FakeClock()
    slow, fast = _pools(clock)
    narrow = Dispatcher(candidates=[slow], timer=FakeTimer(clock), tune=True, cache_dir=tmp_path)
    assert narrow.resolve(cpu_problem())[0].name == "slow"
    saved = json.loads(next(tmp_path.glob("*.json")).read_text())["entries"]
    assert next(iter(saved.values()))["tuned_over"] == ["slow"]
    wide = Dispatcher(candidates=[slow, fast], timer=FakeTimer(clock), tune=True,
                      cache_dir=tmp_path)
    assert wide.resolve(cpu_problem())[0].name == "fast"
    # and the wide tuning, saved, serves a third process without a new tuning
    timer = FakeTimer(clock)
    again = Dispatcher(candidates=[slow, fast], timer=timer, tune=True, cache_dir=tmp_path)
    assert again.resolve(cpu_problem())[0].name == "fast" and timer.calls == 0


def test_a_narrow_entry_still_serves_where_tuning_is_off(tmp_path):
    clock = FakeClock()
    slow, fast = _pools(clock)
    Dispatcher(candidates=[slow], timer=FakeTimer(clock), tune=True,
               cache_dir=tmp_path).resolve(cpu_problem())
    off = Dispatcher(candidates=[slow, fast], timer=FakeTimer(clock), tune=False,
                     cache_dir=tmp_path)
    assert off.resolve(cpu_problem())[0].name == "slow" and off.stats["hits"] == 1


def test_an_entry_tuned_without_tile_major_is_narrower(monkeypatch, tmp_path):
    clock = FakeClock()
    slow, _ = _pools(clock)
    monkeypatch.setenv("FP8TOWER_TILE_MAJOR", "0")
    d = Dispatcher(candidates=[slow], timer=FakeTimer(clock), tune=True, cache_dir=tmp_path)
    d.resolve(cpu_problem())
    entry = d.entries_for(cpu_problem())[cpu_problem().key()]
    assert entry.tile_major is False and d.narrower(cpu_problem(), entry) is None
    monkeypatch.setenv("FP8TOWER_TILE_MAJOR", "1")
    assert "tile-major" in d.narrower(cpu_problem(), entry)
    # an entry of an older file records neither: taken as complete
    assert d.narrower(cpu_problem(), dataclasses.replace(entry, tile_major=None)) is None


@pytest.mark.skipif(not hasattr(os, "fchmod"), reason="POSIX modes")
def test_a_saved_cache_file_follows_the_umask(tmp_path):
    """mkstemp's 0600 made a team's shared cache folder unreadable to all but its last
    writer, who then replaced the file, dropping the others' entries."""
    clock = FakeClock()
    slow, _ = _pools(clock)
    old = os.umask(0o022)
    try:
        Dispatcher(candidates=[slow], timer=FakeTimer(clock), tune=True,
                   cache_dir=tmp_path).resolve(cpu_problem())
    finally:
        os.umask(old)
    f = next(tmp_path.glob("*.json"))
    assert stat.S_IMODE(f.stat().st_mode) == 0o644


def test_save_never_replaces_a_file_it_could_not_read(tmp_path, monkeypatch):
    clock = FakeClock()
    slow, _ = _pools(clock)
    Dispatcher(candidates=[slow], timer=FakeTimer(clock), tune=True,
               cache_dir=tmp_path).resolve(cpu_problem())
    f = next(tmp_path.glob("*.json"))
    before = f.read_bytes()
    real_open = type(f).open

    def denied(self, *a, **k):
        if self == f:
            raise PermissionError(13, "Permission denied", str(self))
        return real_open(self, *a, **k)

    monkeypatch.setattr(type(f), "open", denied)
    d = Dispatcher(candidates=[slow], timer=FakeTimer(clock), tune=True, cache_dir=tmp_path)
    with pytest.warns(tcache.TuningCacheWarning, match="could not save"):
        d.resolve(cpu_problem(m=1))
    monkeypatch.undo()
    assert f.read_bytes() == before


def test_a_save_removes_temp_files_a_crashed_writer_left(tmp_path):
    clock = FakeClock()
    slow, _ = _pools(clock)
    d = Dispatcher(candidates=[slow], timer=FakeTimer(clock), tune=True, cache_dir=tmp_path)
    d.resolve(cpu_problem())
    f = next(tmp_path.glob("*.json"))
    left = tmp_path / f".{f.name}.abc123.tmp"
    left.write_text('{"meta": ')
    d.resolve(cpu_problem(m=1))
    assert not left.exists() and f.exists()


def test_a_name_error_in_a_kernel_source_propagates_from_tuning():
    """A typo in a Triton kernel is a CompilationError, which the tuner caught as 'cannot run
    here' for every config: auto served another backend without a word (DESIGN.md: only GPU
    errors are caught)."""
    errors = pytest.importorskip("triton.compiler.errors")
    clock = FakeClock()
    src = "def k(x_ptr):\n    tl.store(x_ptr, undefined_name)\n"
    err = errors.CompilationError(src, ast.parse(src).body[0].body[0],
                                  "NameError('undefined_name is not defined')")

    def broken(*a, **k):
        raise err

    tri = dataclasses.replace(fake_backend("triton", clock, {"default": 5.0}), run=broken)
    with pytest.raises(errors.CompilationError):
        tsearch.tune_problem(cpu_problem(), [tri, fake_backend("cublaslt", clock,
                                                               {"default": 9.0})],
                             timer=FakeTimer(clock))
    # a build that fails for want of resources is still this GPU's limit: recorded, not raised
    limit = errors.CompilationError(src, None, "out of shared memory")
    assert not tsearch.is_source_error(limit)


def test_the_cache_meta_changes_with_the_nvcc_that_builds_cutlass(monkeypatch):
    base = tcache.environment_meta(None)
    assert {"nvcc", "nvcc_flags"} <= set(base)
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-O0")
    assert tcache.meta_mismatch(base, tcache.environment_meta(None))


def test_fp8tower_retune_env_forces_the_tune_command_to_retune():
    """`fp8tower tune` passed retune=False over FP8TOWER_RETUNE=1."""
    from pathlib import Path

    src = (Path(paths.__file__).parent / "cli" / "tune.py").read_text()
    assert "retune=True if retune else None" in src


def test_a_misspelt_fp8tower_variable_is_reported(monkeypatch):
    monkeypatch.setenv("FP8TOWER_RETUEN", "1")
    monkeypatch.setattr(env, "_warned", set())
    with pytest.warns(RuntimeWarning, match="FP8TOWER_RETUEN .*did you mean FP8TOWER_RETUNE"):
        env.check_flags()


def test_an_unknown_fp8tower_variable_lists_the_users_variables(monkeypatch):
    """The list was KNOWN[:-2]: the last two entries had to stay the tests' own names."""
    monkeypatch.setenv("FP8TOWER_QQQQQQQQQQQQQQQQQQQQQQQQ", "1")
    monkeypatch.setattr(env, "_warned", set())
    with pytest.warns(RuntimeWarning) as rec:
        env.check_flags()
    (msg,) = [str(w.message) for w in rec if "FP8TOWER_QQQQQQQQQQQQQQQQQQQQQQQQ" in str(w.message)]
    assert msg.endswith("known: " + ", ".join(env.USER_KNOWN))
    assert "FP8TOWER_LOG" in msg and "FP8TOWER_FUZZ_EXAMPLES" not in msg


def test_fp8tower_log_shows_what_tuning_chose(monkeypatch, caplog):
    import logging

    monkeypatch.setenv("FP8TOWER_LOG", "info")
    env.setup_logging()
    assert logging.getLogger("fp8tower").level == logging.INFO
    clock = FakeClock()
    slow, fast = _pools(clock)
    with caplog.at_level(logging.INFO, logger="fp8tower"):
        Dispatcher(candidates=[slow, fast], timer=FakeTimer(clock), tune=True,
                   persist=False).resolve(cpu_problem())
    assert any("tuned " in r.getMessage() for r in caplog.records)
    monkeypatch.setenv("FP8TOWER_LOG", "loud")
    with pytest.raises(ValueError, match="FP8TOWER_LOG='loud'"):
        env.setup_logging()
    logging.getLogger("fp8tower").setLevel(logging.NOTSET)


def test_gpus_whose_names_slug_alike_keep_their_own_files():
    names = ["NVIDIA H100 80GB HBM3", "NVIDIA H100-80GB-HBM3", "Ускоритель А", "Ускоритель Б"]
    files = [paths.cache_file_name(n) for n in names]
    assert len(set(files)) == 4 and files[0] == "nvidia-h100-80gb-hbm3.json"
    assert paths.cache_file_name("NVIDIA H200") == "nvidia-h200.json"


def test_a_relative_xdg_cache_home_does_not_move_with_the_working_directory(monkeypatch,
                                                                            tmp_path):
    monkeypatch.delenv("FP8TOWER_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", "rel")
    monkeypatch.chdir(tmp_path)
    first = paths.cache_dir()
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert paths.cache_dir() == first and first.is_absolute()


def test_a_cache_folder_that_is_a_file_is_named(tmp_path):
    afile = tmp_path / "afile"
    afile.write_text("x")
    clock = FakeClock()
    slow, _ = _pools(clock)
    d = Dispatcher(candidates=[slow], timer=FakeTimer(clock), tune=True, cache_dir=afile)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        d.resolve(cpu_problem())
    assert any("is a file (FP8TOWER_CACHE_DIR" in str(w.message) for w in caught)
