"""Rewrite the JSON files of benchmarks/results without whitespace: the same values, about 30%
fewer bytes.

Why: a device call carries the working tree, tracked files included, up to 64 MiB in all, wheels
too. By session 29 (2026-12-04) the tracked files were 54.1 MiB, 38.7 of it results JSON
written with indentation (tuning caches of 0.8-1.1 MB each), so the cuDNN frontend's wheel
(11.6 MB) no longer fitted beside the test wheels. Written without whitespace the same files
take 27.1 MiB. Each file is parsed, dumped with ``separators=(",", ":")`` (key order, integers,
floats' shortest round-trip digits, NaN and non-ASCII text kept), parsed again and compared with
the first parse before it is replaced; a file that is not JSON is named and left alone.

Tuning caches archived in a session's folder (``*/**/tuning_cache*.json``, and from session 64
``*/**/cache*.json``: machine-read, 0.3-0.8 MB each even compact, 14.7 MB in 40 files by
session 30; 21 more named ``cache*.json``, 7.1 MB, by session 64, when the tracked files
left 2.4 MB of a device call's 64 MiB beside its 7.4 MB of wheels) are stored gzipped
instead, as ``X.json.gz`` (about 6x smaller; written with no timestamp, so the same content
gives the same bytes): a citation of ``X.json`` is served by ``X.json.gz``
(benchmarks/restamp_cache.py reads either; tests/test_evidence_paths.py accepts either). The
top-level ``results/tuning_cache_*.json`` stay plain: tests and tools read them as they are.

    python benchmarks/compact_results.py            # every *.json under benchmarks/results
    python benchmarks/compact_results.py --check    # exit 1 naming the files not yet compact
    python benchmarks/compact_results.py PATH ...   # these files or folders
"""

from __future__ import annotations

import argparse
import gzip
import io
import json
import math
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"


def same(a, b) -> bool:
    """Deep equality of parsed JSON in which NaN equals NaN and 1 differs from 1.0 and True."""
    if type(a) is not type(b):
        return False
    if isinstance(a, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return a == b


def compact_text(text: str, name: str = "<text>") -> str:
    """``text`` (one JSON document) without whitespace, ending in a newline; ValueError naming
    ``name`` when it is not JSON or would not read back as the same value."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"{name}: not JSON ({e})") from None
    out = json.dumps(data, separators=(",", ":"), ensure_ascii=False) + "\n"
    if not same(json.loads(out), data):
        raise ValueError(f"{name}: its compact form reads back as another value")
    return out


def archived_cache(path: Path) -> bool:
    """Whether ``path`` is a tuning cache kept in a session's folder (stored gzipped)."""
    try:
        rel = path.resolve().relative_to(RESULTS)
    except ValueError:
        return False
    return (len(rel.parts) > 1 and rel.name.startswith(("tuning_cache", "cache"))
            and rel.suffix == ".json")


def gzip_bytes(text: str) -> bytes:
    """``text`` gzipped with no name and no timestamp: the same text, the same bytes."""
    buf = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buf, mtime=0, compresslevel=9) as f:
        f.write(text.encode("utf-8"))
    return buf.getvalue()


def json_files(paths: list[Path]) -> list[Path]:
    """The *.json files named, or found under the folders named, sorted."""
    found: set[Path] = set()
    for p in paths:
        if p.is_dir():
            found.update(p.rglob("*.json"))
        elif p.is_file():
            found.add(p)
        else:
            raise FileNotFoundError(f"{p}: no such file or folder")
    return sorted(found)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("paths", nargs="*", type=Path, help=f"files or folders (default {RESULTS})")
    ap.add_argument("--check", action="store_true",
                    help="change nothing; exit 1 naming each file that is not compact")
    args = ap.parse_args(argv)
    try:
        files = json_files(args.paths or [RESULTS])
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 2
    before = after = 0
    loose, bad = [], []
    for f in files:
        text = f.read_text(encoding="utf-8")
        try:
            out = compact_text(text, str(f))
        except ValueError as e:
            bad.append(str(e))
            continue
        before += len(text.encode())
        after += len(out.encode())
        if archived_cache(f):
            loose.append(f)
            packed = gzip_bytes(out)
            after += len(packed) - len(out.encode())
            if not args.check:
                if gzip.decompress(packed).decode("utf-8") != out:
                    raise RuntimeError(f"{f}: gzip did not read back")  # never expected
                f.with_name(f.name + ".gz").write_bytes(packed)
                f.unlink()
        elif out != text:
            loose.append(f)
            if not args.check:
                f.write_text(out, encoding="utf-8")
    for line in bad:
        print(f"skipped {line}", file=sys.stderr)
    if args.check:
        for f in loose:
            print(f"not gzipped: {f}" if archived_cache(f) else f"not compact: {f}")
        return 1 if loose else 0
    print(f"{len(files)} JSON files, {len(loose)} rewritten or gzipped: {before / 2**20:.1f} -> "
          f"{after / 2**20:.1f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
