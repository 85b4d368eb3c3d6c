"""Every `from fp8tower... import name` in the package, its benchmarks and tests names
something that exists, function-level (lazy) imports included: a moved or renamed module
otherwise breaks only the code path that runs it, often on the GPU alone (2026-11-30: a lazy
`from .kernels.read_ceiling import ...` left behind by a move, inside the read-ceiling
measurement, passed every CPU test)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src" / "fp8tower"


def _module_of(path: Path) -> str | None:
    if SRC in path.parents or path.parent == SRC:
        rel = path.relative_to(SRC.parent).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts.pop()
        return ".".join(parts)
    return None


def _targets(path: Path):
    """(line, absolute module, imported name or None) of every fp8tower import in ``path``."""
    here = _module_of(path)
    is_pkg = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                if here is None:
                    continue
                base = here.split(".")
                base = base if is_pkg else base[:-1]
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            if mod == "fp8tower" or mod.startswith("fp8tower."):
                for alias in node.names:
                    yield node.lineno, mod, alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("fp8tower"):
                    yield node.lineno, alias.name, None


FILES = sorted(SRC.rglob("*.py")) + sorted((ROOT / "benchmarks").glob("*.py")) + sorted(
    (ROOT / "tests").rglob("*.py"))


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_fp8tower_imports_resolve(path):
    bad = []
    for line, mod, name in _targets(path):
        try:
            m = importlib.import_module(mod)
        except ModuleNotFoundError as e:
            if e.name and not e.name.startswith("fp8tower"):
                continue  # an optional third-party package (skipped with its reason elsewhere)
            bad.append(f"line {line}: no module {mod}")
            continue
        if name is None or name == "*" or hasattr(m, name):
            continue
        try:
            importlib.import_module(f"{mod}.{name}")
        except ModuleNotFoundError:
            bad.append(f"line {line}: {mod} has no {name}")
    assert not bad, "; ".join(bad)
