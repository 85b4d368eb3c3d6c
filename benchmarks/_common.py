"""Small helpers shared by the benchmark scripts (no torch import: cli_startup.py uses it)."""

from __future__ import annotations

from pathlib import Path


def default_json_path(directory: str | Path, stem: str, date_iso: str) -> Path:
    """A result path no earlier run holds: ``<directory>/<stem>_<YYYY-MM-DD>_<HHMMSS>.json``
    (``date_iso``: provenance's ISO date), with ``-2``, ``-3``, ... before ``.json`` while that
    name is taken, so that two runs of one day (or one second) never overwrite each other."""
    day, _, clock = date_iso.partition("T")
    hhmmss = "".join(c for c in clock[:8] if c.isdigit()) or "000000"
    base = Path(directory) / f"{stem}_{day}_{hhmmss}"
    path = base.with_name(base.name + ".json")
    n = 2
    while path.exists():
        path = base.with_name(f"{base.name}-{n}.json")
        n += 1
    return path


def l2_rotation(bytes_per_copy: int, l2_bytes: int) -> tuple[int, bool]:
    """(copies, cold) of the timer's weight rotation: ``copies`` as
    fp8tower.tuning.timer.rotation_copies picks them (at most MAX_COPIES), ``cold`` whether
    they exceed L2_FACTOR x the L2 (a capped rotation of small weights is timed partly warm)."""
    from fp8tower.tuning import timer

    copies = timer.rotation_copies(bytes_per_copy, l2_bytes)
    return copies, copies * bytes_per_copy > timer.L2_FACTOR * l2_bytes


def timing_fields(t, bytes_moved: int, ceiling: float, copies: int, cold: bool) -> dict:
    """A timed row's fields from a Timing: us, us_min, spread, gbs, the rotation (copies, cold)
    and pct_ceiling, None when not cold (a warm-L2 rate is no fraction of the DRAM ceiling)."""
    gbs = bytes_moved / t.median_us / 1e3
    return {"us": round(t.median_us, 3), "us_min": round(t.min_us, 3),
            "spread": round(t.spread, 4), "gbs": round(gbs, 1), "copies": copies, "cold": cold,
            "pct_ceiling": round(100 * gbs / ceiling, 1) if cold else None}


def pct_cell(row: dict) -> str:
    """A table's % ceiling cell: the percentage, or "warm" for a row not timed cold."""
    return "warm" if row.get("pct_ceiling") is None else f"{row['pct_ceiling']:.1f}"
