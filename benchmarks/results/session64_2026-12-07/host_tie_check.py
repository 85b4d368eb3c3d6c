"""What FP8TOWER_HOST_TIE=0 serves from the caches committed in sessions 60-64 (the
27B towers' and the per-GEMM scorecards'): each key whose choice differs from the one served
with the host tie on (the default), with both candidates' chain times. The decode step's
verdict on the one H200 tower key is in session 63's moves.txt (0.972x).

No GPU:  python benchmarks/results/session64_2026-12-07/host_tie_check.py > .../host_tie_check.txt
"""

from __future__ import annotations

import os
from pathlib import Path

from fp8tower.tuning.cache import read_cache_file

RESULTS = Path(__file__).resolve().parents[1]


def served(path: Path, tie: str) -> dict:
    os.environ["FP8TOWER_HOST_TIE"] = tie
    return read_cache_file(path).entries


def chosen(e):
    """The measurement of the choice the entry was served when read (``Entry.winner`` reads
    the variable as it is now)."""
    return next(c for c in e.ranked() if (c.backend, c.config) == (e.backend, e.config))


def main() -> None:
    paths = sorted(RESULTS.glob("session6[0-4]_*/**/tuning_cache*.json*"))
    for path in paths:
        on, off = served(path, "1"), served(path, "0")
        moved = [k for k in sorted(on) if (on[k].backend, on[k].config)
                 != (off[k].backend, off[k].config)]
        print(f"{path.relative_to(RESULTS)}: {len(on)} keys, {len(moved)} moved")
        for k in moved:
            a, b = chosen(on[k]), chosen(off[k])
            print(f"  {k}\n    tie on  {a.label} {a.median_us:.2f} us\n"
                  f"    tie off {b.label} {b.median_us:.2f} us ({a.median_us / b.median_us:.4f}x)")


if __name__ == "__main__":
    main()
