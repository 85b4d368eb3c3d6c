"""benchmarks/tower_rows.py (the device A/B scripts' one line per tower JSON) on the CPU."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

_PATH = Path(__file__).resolve().parents[1] / "benchmarks" / "tower_rows.py"
_spec = importlib.util.spec_from_file_location("tower_rows", _PATH)
tower_rows = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tower_rows)


def test_one_line_per_tower_json_and_a_bad_one_named(tmp_path, capsys):
    row = {"scheme": "per_tensor", "m": 1, "ms_per_step": 2.15853, "chosen": {"triton": 128}}
    (tmp_path / "tower_after_1.json").write_text(
        json.dumps({"read_ceiling_gbps": 4462.4, "rows": [row]}))
    (tmp_path / "tower_before_1.json").write_text("{")
    (tmp_path / "other.json").write_text("{}")  # not a tower_*.json: not listed
    tower_rows.main([str(tmp_path)])
    out = capsys.readouterr().out.splitlines()
    assert out[0] == (
        "tower_after_1.json 4462 GB/s [('per_tensor', 1, None, None, 2.1585, {'triton': 128})]")
    assert out[1].startswith("tower_before_1.json: not a bench tower JSON (JSONDecodeError")
    assert len(out) == 2


def test_missing_directory_is_named(tmp_path, capsys):
    with pytest.raises(SystemExit):
        tower_rows.main([str(tmp_path / "nope")])
    assert "no such directory" in capsys.readouterr().err


def test_skipped_rows_and_a_null_ceiling_still_print_with_arm_and_backend(tmp_path, capsys):
    ok = {"scheme": "per_tensor", "arm": "merged", "backend": "auto", "m": 1,
          "status": "ok", "ms_per_step": 2.15853, "chosen": {"triton": 128}}
    skipped = {"scheme": "block128", "arm": "merged", "backend": "cutlass", "m": 1,
               "status": "skipped", "reason": "needs sm90", "ms_per_step": None}
    (tmp_path / "tower_cpu.json").write_text(
        json.dumps({"read_ceiling_gbps": None, "rows": [ok, skipped]}))
    tower_rows.main([str(tmp_path)])
    out = capsys.readouterr().out.strip()
    assert out == ("tower_cpu.json no read ceiling [('per_tensor', 1, 'merged', 'auto', 2.1585, "
                   "{'triton': 128}), ('block128', 1, 'merged', 'cutlass', "
                   "'skipped: needs sm90', None)]")
