"""benchmarks/restamp_cache.py (the device A/B scripts' cache re-stamp) on the CPU."""

from __future__ import annotations

import gzip
import importlib.util
import json
from pathlib import Path

import pytest

from fp8tower import provenance
from fp8tower.tuning import cache

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "restamp_cache.py"
_spec = importlib.util.spec_from_file_location("restamp_cache", _PATH)
restamp = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(restamp)


def test_restamped_copy_carries_this_trees_meta_into_every_dir(tmp_path, capsys):
    src = tmp_path / "tuning_cache.json"
    entries = {"m1_n8_k8_per_tensor": {"backend": "triton"}}
    src.write_text(json.dumps({"meta": {"kernels": "0000000000000000"}, "entries": entries}))
    outs = [tmp_path / "a", tmp_path / "b"]
    for d in outs:
        d.mkdir()
    restamp.main([str(src), *map(str, outs), "--gpu", "NVIDIA H200"])
    for d in outs:
        written = json.loads((d / cache.cache_file_name("NVIDIA H200")).read_text())
        assert written["entries"] == entries
        assert written["meta"]["kernels"] == provenance.kernel_code()
        assert written["meta"]["gpu"] == "NVIDIA H200"
    assert "'kernels': ('0000000000000000'" in capsys.readouterr().out


@pytest.mark.parametrize("content,why", [(None, "cannot read"), ("{", "cannot read"),
                                         ('{"meta": {}}', "not a tuning cache")])
def test_bad_cache_is_named(tmp_path, capsys, content, why):
    src = tmp_path / "c.json"
    if content is not None:
        src.write_text(content)
    with pytest.raises(SystemExit):
        restamp.main([str(src), str(tmp_path), "--gpu", "x"])
    assert why in capsys.readouterr().err


def test_missing_out_dir_is_named(tmp_path, capsys):
    src = tmp_path / "c.json"
    src.write_text('{"entries": {}}')
    with pytest.raises(SystemExit):
        restamp.main([str(src), str(tmp_path / "nope"), "--gpu", "x"])
    assert "not a directory" in capsys.readouterr().err


def test_prefetch_is_set_on_every_triton_pdl_config_only(tmp_path, capsys):
    pdl = {"block_n": 64, "pdl": True, "prefetch": 2}
    entry = {"backend": "triton", "config": dict(pdl),
             "candidates": [{"backend": "triton", "config": dict(pdl)},
                            {"backend": "triton", "config": {"block_n": 64, "prefetch": 2}},
                            {"backend": "cutlass", "config": {"pdl": True, "prefetch": -1.0}},
                            {"backend": "cublaslt", "config": None}],
             "context": {"ms_per_step": [{"backend": "triton", "config": dict(pdl), "ms": 2.0}]}}
    src = tmp_path / "tuning_cache.json"
    src.write_text(json.dumps({"meta": {}, "entries": {"k": entry}}))
    restamp.main([str(src), str(tmp_path), "--gpu", "NVIDIA H200", "--prefetch", "1"])
    got = json.loads((tmp_path / cache.cache_file_name("NVIDIA H200")).read_text())["entries"]["k"]
    assert got["config"]["prefetch"] == 1
    assert [c["config"] for c in got["candidates"]] == [
        {**pdl, "prefetch": 1}, {"block_n": 64, "prefetch": 2},  # no PDL: left alone
        {"pdl": True, "prefetch": -1.0}, None]  # CUTLASS's prefetch ratio: another knob
    assert got["context"]["ms_per_step"][0]["config"]["prefetch"] == 1
    assert "prefetch set on 3 Triton PDL configs" in capsys.readouterr().out


def test_negative_prefetch_is_named(tmp_path, capsys):
    src = tmp_path / "c.json"
    src.write_text('{"entries": {}}')
    with pytest.raises(SystemExit):
        restamp.main([str(src), str(tmp_path), "--gpu", "x", "--prefetch", "-1"])
    assert "--prefetch must be >= 0, got -1" in capsys.readouterr().err


def test_a_gzipped_archive_is_read_where_the_plain_name_is_cited(tmp_path):
    """Results folders keep their caches as tuning_cache.json.gz; scripts name the .json."""
    entries = {"m1_n8_k8_per_tensor": {"backend": "triton"}}
    plain = tmp_path / "tuning_cache.json"
    (tmp_path / "tuning_cache.json.gz").write_bytes(
        gzip.compress(json.dumps({"meta": {}, "entries": entries}).encode()))
    out = tmp_path / "out"
    out.mkdir()
    restamp.main([str(plain), str(out), "--gpu", "NVIDIA H200"])
    written = json.loads((out / cache.cache_file_name("NVIDIA H200")).read_text())
    assert written["entries"] == entries
    assert restamp.read_cache(str(plain) + ".gz")["entries"] == entries


def test_the_stamp_records_early_launch_as_this_process_would_time(tmp_path, monkeypatch):
    """cache.environment_meta has early_launch (a _META_KEYS entry): the copy is stamped with
    this process's state, and it loads under the same state only."""
    from fp8tower.tuning import timer

    monkeypatch.setattr(timer, "_can_edit_graphs", lambda: True)
    src = tmp_path / "tuning_cache.json"
    src.write_text(json.dumps({"meta": {}, "entries": {}}))
    out = tmp_path / "out"
    out.mkdir()
    restamp.main([str(src), str(out), "--gpu", "NVIDIA H200"])
    written = out / cache.cache_file_name("NVIDIA H200")
    assert json.loads(written.read_text())["meta"]["early_launch"] is True
    monkeypatch.setenv("FP8TOWER_EARLY_LAUNCH", "0")
    restamp.main([str(src), str(out), "--gpu", "NVIDIA H200"])
    off = out / cache.cache_file_name("NVIDIA H200")  # its own file (paths.cache_file_name)
    assert off != written and json.loads(off.read_text())["meta"]["early_launch"] is False
    assert json.loads(written.read_text())["meta"]["early_launch"] is True


_RESULTS = Path(__file__).resolve().parents[1] / "benchmarks" / "results"


@pytest.mark.parametrize("name", ["wo_token_H200_2026-12-04/call6/tuning_cache.json",
                                  "wo_token_H200_2026-12-04/call6/tuning_cache_per_tensor.json"])
def test_a_committed_cache_restamps_loads_and_resolves_unchanged(tmp_path, name, interpret):
    """The caches planned GPU runs restamp and read with FP8TOWER_TUNE=0: every entry loads
    under its committed key (byte for byte), and auto serves its cached (backend, config)."""
    import dataclasses
    import warnings

    from fp8tower import backends
    from fp8tower.dispatch import Dispatcher

    path = _RESULTS / name
    raw = restamp.read_cache(str(path))["entries"]
    restamp.main([str(path), str(tmp_path), "--gpu", "NVIDIA H200"])
    pool = [dataclasses.replace(b, unavailable_reason=lambda: None, check=lambda p: None)
            for b in backends.all_backends()]  # as on the H200
    d = Dispatcher(candidates=pool, gpu_name="NVIDIA H200", cache_dir=tmp_path, tune=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a stale file, a skipped entry, an ignored choice
        entries = cache.DecisionCache.for_device(tmp_path, "NVIDIA H200").load()
        assert list(entries) == list(raw) and all(e.key == k for k, e in entries.items())
        for e in entries.values():
            b, cfg = d.resolve(e.problem)
            assert (b.name, cfg) == (e.backend, e.config), e.key
    assert d.stats["hits"] == len(raw) and d.stats["defaults"] == 0
