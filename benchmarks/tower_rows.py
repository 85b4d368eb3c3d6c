"""Print each ``tower_*.json`` of a directory (``fp8tower bench tower --json``) on one line:
its read ceiling and, per row, scheme, M, arm, backend, ms per step (or why the row was
skipped) and the backends that served it. The
device A/B scripts (ab_tower.sh, retune_ab.sh) print this, since the device tool returns at
most 8 files and a tarball may be all that comes back.

    python3 benchmarks/tower_rows.py DIR
"""

from __future__ import annotations

import argparse
import glob
import json
import os


def row(r: dict) -> tuple:
    """(scheme, M, arm, backend, ms/step or the reason it was skipped, chosen) of a row."""
    ms = r.get("ms_per_step")
    timed = round(ms, 4) if isinstance(ms, (int, float)) else \
        f"{r.get('status') or 'skipped'}: {r.get('reason') or 'no time'}"
    return (r["scheme"], r["m"], r.get("arm"), r.get("backend"), timed, r.get("chosen"))


def lines(directory: str) -> list[str]:
    out = []
    for f in sorted(glob.glob(os.path.join(directory, "tower_*.json"))):
        try:
            with open(f) as fh:
                d = json.load(fh)
            rows = [row(r) for r in d["rows"]]
            ceiling = d["read_ceiling_gbps"]
            gbs = "no read ceiling" if ceiling is None else f"{round(ceiling)} GB/s"
            out.append(f"{os.path.basename(f)} {gbs} {rows}")
        except (OSError, ValueError, KeyError, TypeError) as e:
            out.append(f"{os.path.basename(f)}: not a bench tower JSON ({type(e).__name__}: {e})")
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("directory", help="a directory holding tower_*.json files")
    args = ap.parse_args(argv)
    if not os.path.isdir(args.directory):
        ap.error(f"no such directory: {args.directory}")
    for line in lines(args.directory):
        print(line)


if __name__ == "__main__":
    main()
