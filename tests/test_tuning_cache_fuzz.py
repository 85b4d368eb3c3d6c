"""Property-based fuzzing of the tuning-cache reader (issue 9): a hostile or careless cache
file never raises; every entry it keeps is typed and in range, the rest are listed as issues.
Seeded with a real entry of the committed H200 cache."""

from __future__ import annotations

import json
import math
from pathlib import Path

from fuzzhelpers import fuzz_settings, hostile, set_path
from hypothesis import given
from hypothesis import strategies as st

from fp8tower.tuning.cache import read_cache_file

REAL = Path(__file__).parent.parent / "benchmarks/results/tuning_cache_all_H200_2026-11-29.json"
FUZZ = fuzz_settings(80)
HOSTILE = hostile({"a": {"b": 1}}, [1, 2])
FIELDS = [
    ("backend",),
    ("config",),
    ("date",),
    ("read_ceiling_gbps",),
    ("pruned",),
    ("seeded_from",),
    ("problem", "m"),
    ("problem", "n"),
    ("problem", "k"),
    ("problem", "scheme"),
    ("problem", "act_dtype"),
    ("problem", "capability"),
    ("problem",),
    ("candidates",),
    ("candidates", 0, "median_us"),
    ("candidates", 0, "min_us"),
    ("candidates", 0, "gbps"),
    ("candidates", 0, "spread"),
    ("candidates", 0, "error"),
    ("candidates", 0, "config"),
    ("candidates", 0, "backend"),
    ("config", "split_k"),
    ("config", "block_n"),
]


def _seed() -> tuple[dict, str, dict]:
    doc = json.loads(REAL.read_text())
    key, entry = next(iter(doc["entries"].items()))
    return doc["meta"], key, entry


def _finite_nonneg(v) -> bool:
    return v is None or (math.isfinite(v) and v >= 0)


@FUZZ
@given(edits=st.lists(st.tuples(st.sampled_from(FIELDS), HOSTILE), min_size=1, max_size=3))
def test_fuzz_tuning_cache_entries(tmp_path, edits):
    meta, key, entry = _seed()
    bad = json.loads(json.dumps(entry))
    for keys, value in edits:
        set_path(bad, keys, value)
    path = tmp_path / "cache.json"
    path.write_text(json.dumps({"meta": meta, "entries": {key: bad, "copy": entry}}))
    f = read_cache_file(path)  # never raises
    assert "copy" not in f.entries and any("entry copy skipped" in i for i in f.issues)
    if key not in f.entries:
        assert any(f"entry {key} skipped" in i for i in f.issues)
        return
    e = f.entries[key]
    p = e.problem
    assert all(isinstance(v, int) and 1 <= v < 2**63 for v in (p.m, p.n, p.k))
    assert isinstance(e.backend, str) and isinstance(e.date, str)
    assert e.read_ceiling_gbps is None or (
        math.isfinite(e.read_ceiling_gbps) and e.read_ceiling_gbps > 0
    )
    for c in e.candidates:
        assert all(_finite_nonneg(v) for v in (c.median_us, c.min_us, c.spread, c.gbps))
        assert c.ok == (c.error is None) and (not c.ok or c.median_us > 0)
        for v in (c.config or {}).values():
            assert (
                v is None
                or isinstance(v, (bool, str))
                or (isinstance(v, (int, float)) and abs(v) < 2**63 and math.isfinite(v))
            )
    assert e.winner.backend == e.backend


def test_deeply_nested_cache_file_is_an_issue_not_a_traceback(tmp_path):
    path = tmp_path / "cache.json"
    path.write_text('{"entries": ' + "[" * 100_000 + "]" * 100_000 + "}")
    f = read_cache_file(path)
    assert f.entries == {} and "nested too deeply" in f.issues[0]
