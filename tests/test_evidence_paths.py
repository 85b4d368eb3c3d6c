"""Every results file or directory the docs, the results READMEs and the code's comments cite
by path (``results/NAME/...``) exists: a number quoted from a file that is not in the tree is
a claim nobody can check. (2026-12-04: session 8's call 2, cited in the docs, had never been
committed; the docs now say so.) A session folder's tuning caches are kept gzipped
(benchmarks/compact_results.py): ``X.json.gz`` serves a citation of ``X.json``."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
_RESULTS = _ROOT / "benchmarks" / "results"
_CITE = re.compile(r"results/[A-Za-z0-9_.{},/-]+")


def _sources() -> list[Path]:
    return ([_ROOT / "README.md", *sorted((_ROOT / "docs").glob("*.md")),
             *sorted(_RESULTS.glob("*/README.md")), *sorted((_ROOT / "src").rglob("*.py"))])


def expand(cited: str) -> list[str]:
    """The paths a citation names: trailing punctuation dropped, ``{a,b}`` alternatives and
    ``callA-B`` ranges expanded; [] for a pattern rather than a path (``callN``, a prefix
    ending in ``_`` that a sentence completes)."""
    cited = cited.rstrip(".,;:")
    if "callN" in cited or cited.endswith(("_", "-")):
        return []
    ranged = re.sub(r"call(\d+)-(\d+)",
                    lambda m: "call{" + ",".join(map(str, range(int(m[1]), int(m[2]) + 1))) + "}",
                    cited)
    parts = re.split(r"\{([^}]*)\}", ranged)
    choices = [[p] if i % 2 == 0 else p.split(",") for i, p in enumerate(parts)]
    return ["".join(c) for c in itertools.product(*choices)]


def test_the_citation_rules():
    assert expand("results/a/call{1,2}/x.json,") == ["results/a/call1/x.json",
                                                     "results/a/call2/x.json"]
    assert expand("results/a/call2-3/s.json") == ["results/a/call2/s.json", "results/a/call3/s.json"]
    assert expand("results/a/callN.sh") == [] and expand("results/tower_") == []


def test_every_cited_results_path_exists():
    missing, checked = [], 0
    for src in _sources():
        for line_no, line in enumerate(src.read_text().splitlines(), 1):
            for m in _CITE.finditer(line):
                for path in expand(m.group(0)):
                    checked += 1
                    found = _RESULTS.parent / path
                    if not (found.exists() or found.with_name(found.name + ".gz").exists()):
                        missing.append(f"{src.relative_to(_ROOT)}:{line_no}: {path}")
    assert checked > 100  # 136 on 2026-12-04: a pattern that finds none is broken
    assert not missing, "cited but not in the tree:\n" + "\n".join(missing)


_DOC = re.compile(r"[A-Za-z0-9_./-]+\.md\b")


def test_every_cited_document_exists():
    """The code's comments and the docs cite only documents in the tree (they cited DESIGN.md,
    a document kept outside the repository)."""
    sources = list(_sources())
    missing = []
    for src in sources:
        for line_no, line in enumerate(src.read_text().splitlines(), 1):
            for cited in _DOC.findall(line):
                bases = (_ROOT, _ROOT / "docs", _ROOT / "benchmarks", _RESULTS, src.parent)
                if not any((base / cited).exists() for base in bases):
                    missing.append(f"{src.relative_to(_ROOT)}:{line_no}: {cited}")
    assert not missing, "cited but not in the tree:\n" + "\n".join(missing)
