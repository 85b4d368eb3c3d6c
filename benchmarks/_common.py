"""Small helpers shared by the benchmark scripts: the weight rotation's cold-L2 label and a
timed row's fields (results paths: fp8tower.provenance.result_path)."""

from __future__ import annotations


def l2_rotation(bytes_per_copy: int, l2_bytes: int) -> tuple[int, bool]:
    """(copies, cold) of the timer's weight rotation: ``copies`` as
    fp8tower.tuning.timer.rotation_copies picks them (at most MAX_COPIES), ``cold`` whether
    they exceed L2_FACTOR x the L2 (a capped rotation of small weights is timed partly warm)."""
    from fp8tower.tuning import timer

    copies = timer.rotation_copies(bytes_per_copy, l2_bytes)
    return copies, copies * bytes_per_copy > timer.L2_FACTOR * l2_bytes


def timing_fields(t, bytes_moved: int, ceiling: float, copies: int, cold: bool,
                  writer_us: float | None = None) -> dict:
    """A timed row's fields from a Timing: us, us_min, spread, gbs, the rotation (copies, cold)
    and pct_ceiling, None when not cold (a warm-L2 rate is no fraction of the DRAM ceiling).
    ``writer_us``: the share of the tuner chain's x writer taken off ``t`` (Chain.base_us),
    recorded with the time as measured (``raw_us``), so the row keeps what was measured."""
    gbs = bytes_moved / t.median_us / 1e3
    row = {"us": round(t.median_us, 3), "us_min": round(t.min_us, 3),
           "spread": round(t.spread, 4), "gbs": round(gbs, 1), "copies": copies, "cold": cold,
           "pct_ceiling": round(100 * gbs / ceiling, 1) if cold else None}
    if writer_us:
        row |= {"writer_us": round(writer_us, 3), "raw_us": round(t.median_us + writer_us, 3)}
    return row


def pct_cell(row: dict) -> str:
    """A table's % ceiling cell: the percentage, or "warm" for a row not timed cold."""
    return "warm" if row.get("pct_ceiling") is None else f"{row['pct_ceiling']:.1f}"
