"""benchmarks/results/boundary_timeline_H200_2026-12-04/residency.py's counting, on the CPU
(its compile step is kernels/offline.py's, tested in tests/test_offline_sm90.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_ROOT = Path(__file__).resolve().parents[1]
_DIR = _ROOT / "benchmarks" / "results" / "boundary_timeline_H200_2026-12-04"
sys.path.insert(0, str(_ROOT / "benchmarks"))
_spec = importlib.util.spec_from_file_location("residency", _DIR / "residency.py")
res = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(res)

KB = 1024


def prog(shared_kb: int, grid: int, per_sm: int, registers: int = 40, warps: int = 4) -> dict:
    return {"shared_bytes": shared_kb * KB, "registers": registers, "warps": warps,
            "programs_per_sm": per_sm, "grid": grid}


IN_PROJ = prog(81, 256, 2)  # the tuned 16384x5120 at M = 1: 82944 bytes, two an SM
OUT_PROJ = prog(161, 80, 1, registers=72)  # the deep tile of 5120x6144: 164864 bytes


def test_no_out_proj_program_fits_beside_two_in_proj_programs():
    """228 KB an SM: 2 x (81 + 1) + (161 + 1) > 228, and the in_proj's 256 programs leave
    no SM empty (132 busy, 124 of them with two)."""
    b = res.boundary(IN_PROJ, OUT_PROJ)
    assert b["free_sms"] == 0 and b["early_programs"] == 0


def test_the_in_proj_starts_two_an_sm_on_the_sms_the_out_proj_leaves_empty():
    b = res.boundary(OUT_PROJ, IN_PROJ)
    assert b["free_sms"] == 132 - 80
    assert b["early_programs"] == 52 * 2  # nothing fits beside a 161 KB program
    assert b["early_share"] == pytest.approx(104 / 256, abs=1e-3)


def test_a_small_out_proj_sits_beside_the_in_proj():
    """61 KB: 2 x 82 + 62 = 226 KB <= 228, so all 80 start early; an SM holding one in_proj
    program takes two of them (82 + 2 x 62 = 206)."""
    small = prog(61, 80, 3, registers=48)
    assert res.boundary(IN_PROJ, small)["early_programs"] == 80
    assert res.fits_beside(IN_PROJ, small, 1) == 2
    assert res.fits_beside(IN_PROJ, small, 2) == 1


def test_registers_and_warps_bound_what_fits_too():
    fat = prog(10, 132, 1, registers=255, warps=8)  # 255 x 32 -> 8192 a warp, 64 K an SM
    assert res.fits_beside(fat, prog(10, 132, 4), 1) == 0
    many = prog(1, 132, 4, registers=16, warps=16)  # 4 x 16 warps: the SM's 64
    assert res.fits_beside(many, prog(1, 132, 4, registers=16), 4) == 0
