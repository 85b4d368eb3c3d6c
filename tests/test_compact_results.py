"""benchmarks/compact_results.py: results JSON rewritten without whitespace, values unchanged."""

from __future__ import annotations

import gzip
import importlib.util
import json
import math
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "compact_results.py"
_spec = importlib.util.spec_from_file_location("compact_results", _PATH)
cr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cr)

DOC = {"meta": {"gpu": "NVIDIA H200", "note": "5120×6144"}, "entries": {
    "b": {"us": [10.13, 1e-05, 0.1 + 0.2], "n": 7, "ok": True, "none": None},
    "a": {"us": float("nan"), "big": 2**63 + 1, "neg": -0.0, "inf": float("inf")}}}


def test_compact_keeps_every_value_key_order_and_text():
    text = json.dumps(DOC, indent=1, ensure_ascii=False)
    out = cr.compact_text(text)
    assert len(out) < len(text) and out.endswith("\n") and "\n" not in out[:-1]
    back = json.loads(out)
    assert list(back["entries"]) == ["b", "a"]  # key order, not sorted
    assert back["entries"]["b"]["us"] == [10.13, 1e-05, 0.1 + 0.2]  # the same floats, bit for bit
    assert math.isnan(back["entries"]["a"]["us"]) and back["entries"]["a"]["big"] == 2**63 + 1
    assert math.copysign(1.0, back["entries"]["a"]["neg"]) == -1.0
    assert back["meta"]["note"] == "5120×6144"
    assert cr.compact_text(out) == out  # already compact: unchanged


def test_same_tells_types_and_nan_apart():
    assert cr.same(float("nan"), float("nan"))
    assert not cr.same(1, 1.0) and not cr.same(1, True) and not cr.same({"a": 1, "b": 2},
                                                                        {"b": 2, "a": 1})
    assert not cr.same([1, 2], [1, 2, 3]) and cr.same({"a": [None, "x"]}, {"a": [None, "x"]})


def test_not_json_is_named_and_left_alone(tmp_path, capsys):
    good, bad = tmp_path / "r" / "good.json", tmp_path / "r" / "bad.json"
    good.parent.mkdir()
    good.write_text(json.dumps(DOC, indent=2))
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="bad.json: not JSON"):
        cr.compact_text(bad.read_text(), str(bad))
    assert cr.main([str(tmp_path)]) == 0
    assert bad.read_text() == "{not json" and "skipped" in capsys.readouterr().err
    assert cr.same(json.loads(good.read_text()), DOC) and "\n" not in good.read_text()[:-1]


def test_check_names_loose_files_and_changes_nothing(tmp_path, capsys):
    f = tmp_path / "a.json"
    f.write_text(json.dumps({"x": [1, 2]}, indent=1))
    before = f.read_text()
    assert cr.main(["--check", str(f)]) == 1
    assert f.read_text() == before and "not compact" in capsys.readouterr().out
    assert cr.main([str(f)]) == 0
    assert cr.main(["--check", str(f)]) == 0


def test_a_missing_path_is_named(tmp_path, capsys):
    assert cr.main([str(tmp_path / "nope")]) == 2
    assert "nope: no such file or folder" in capsys.readouterr().err


def test_a_sessions_tuning_caches_are_gzipped_the_top_level_ones_kept(tmp_path, monkeypatch,
                                                                       capsys):
    monkeypatch.setattr(cr, "RESULTS", tmp_path)
    session = tmp_path / "s_H200" / "call1"
    session.mkdir(parents=True)
    cache = session / "tuning_cache_per_tensor.json"
    cache.write_text(json.dumps(DOC, indent=1, ensure_ascii=False))
    other = session / "tower.json"
    other.write_text(json.dumps({"ms": 2.07}))
    top = tmp_path / "tuning_cache_all_H200.json"
    top.write_text(json.dumps({"entries": {}}, indent=1))
    short = session / "cache_old.json"  # a session's cache named without the prefix
    short.write_text(json.dumps({"entries": {}}))
    assert [cr.archived_cache(p) for p in (cache, other, top, short)] == [True, False, False,
                                                                          True]
    assert cr.main(["--check", str(tmp_path)]) == 1
    assert f"not gzipped: {cache}" in capsys.readouterr().out
    assert cr.main([str(tmp_path)]) == 0
    packed = session / "tuning_cache_per_tensor.json.gz"
    assert not cache.exists() and packed.exists()
    assert not short.exists() and (session / "cache_old.json.gz").exists()
    assert cr.same(json.loads(gzip.decompress(packed.read_bytes())), DOC)
    assert packed.read_bytes() == cr.gzip_bytes(cr.compact_text(json.dumps(DOC)))  # no timestamp
    assert top.exists() and "\n" not in top.read_text()[:-1]  # compacted, not gzipped
    assert cr.main(["--check", str(tmp_path)]) == 0


def test_the_committed_results_are_compact(capsys):
    """README: results JSON is kept compact (session 33 committed four files that were not)."""
    assert cr.main(["--check"]) == 0, capsys.readouterr().out
