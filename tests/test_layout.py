"""The package's imports run down the page (DESIGN.md "Architecture"): no cycle between
fp8tower modules, kernels/ never imports backends/, trace/ never imports the tower, nn/ or
dispatch.

The graph is read from the source (AST), not by importing: every ``import`` and
``from ... import`` anywhere in a module, at module level or inside a function (a lazy import
still runs the imported module when the function is called), relative or absolute.

Edges:
- ``import a.b.c`` / ``from a.b import c``: to ``a.b.c`` when that is a module, else to
  ``a.b`` (a name defined in ``a.b``); plus to the ``__init__`` of every package on the way
  (``a``, ``a.b``: Python runs them first) that does not contain the importer. A module's
  own ancestors are left out: a package ``__init__`` that imports its children
  (``trace/__init__.py``) would otherwise make every child a cycle, though Python has
  already started that ``__init__`` when it runs the child.
- ``from fp8tower import Fp8Linear``: the root ``__init__`` exports names lazily (its
  ``__getattr__``, table ``_EXPORTS``, and any submodule by name): the edge goes to the
  module that defines the name, as at run time; the root ``__init__`` itself imports nothing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "fp8tower"


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted((SRC / ROOT).rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


MODULES = _modules()


def _is_package(name: str) -> bool:
    return MODULES.get(name, Path()).name == "__init__.py"


def _lazy_exports() -> dict[str, str]:
    """The root __init__'s _EXPORTS: name -> absolute module."""
    tree = ast.parse(MODULES[ROOT].read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "_EXPORTS" for t in node.targets
        ):
            return {k: f"{ROOT}.{v}" for k, v in ast.literal_eval(node.value).items()}
    return {}


EXPORTS = _lazy_exports()


def _resolve(importer: str, level: int, module: str | None) -> str:
    if level == 0:
        return module or ""
    base = importer.split(".") if _is_package(importer) else importer.split(".")[:-1]
    base = base[: len(base) - (level - 1)]
    return ".".join(base + ([module] if module else []))


def _targets(importer: str, node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    assert isinstance(node, ast.ImportFrom)
    base = _resolve(importer, node.level, node.module)
    out = []
    for a in node.names:
        sub = f"{base}.{a.name}"
        if sub in MODULES:
            out.append(sub)
        elif base == ROOT and a.name in EXPORTS:
            out.append(EXPORTS[a.name])
        else:
            out.append(base)
    return out


def _edges(importer: str) -> set[str]:
    tree = ast.parse(MODULES[importer].read_text(), str(MODULES[importer]))
    found = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Import, ast.ImportFrom)):
            continue
        for target in _targets(importer, node):
            if target != ROOT and not target.startswith(ROOT + "."):
                continue  # not ours
            parts = target.split(".")
            for i in range(1, len(parts) + 1):
                name = ".".join(parts[:i])
                own_ancestor = importer == name or importer.startswith(name + ".")
                if name in MODULES and not own_ancestor:
                    found.add(name)
    return found


GRAPH = {m: _edges(m) for m in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan), or self-loops."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1 or v in graph[v]:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def _reachable(start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in GRAPH[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def _under(pkg: str) -> list[str]:
    return [m for m in MODULES if m == pkg or m.startswith(pkg + ".")]


def test_the_graph_is_read():
    """The walker sees the edges we know of (a broken walker finds no cycle either)."""
    assert "fp8tower.nn.ops" in GRAPH["fp8tower.nn.linear"]  # module level, relative
    assert "fp8tower.tower.capture" in GRAPH["fp8tower.cli.trace"]  # inside a function
    assert "fp8tower.kernels.configs" in GRAPH["fp8tower.backends.triton_gemm"]
    assert {"fp8tower.trace", "fp8tower.trace.capture"} <= GRAPH["fp8tower.tower.capture"]
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    cycles = _cycles(GRAPH)
    assert not cycles, "import cycles between fp8tower modules: " + "; ".join(
        " <-> ".join(c) for c in cycles)


@pytest.mark.parametrize(("pkg", "forbidden"), [
    ("fp8tower.kernels", ("fp8tower.backends",)),
    ("fp8tower.trace", ("fp8tower.tower", "fp8tower.nn", "fp8tower.dispatch")),
    ("fp8tower.tuning", ("fp8tower.dispatch", "fp8tower.nn", "fp8tower.tower")),
    ("fp8tower.trace.tables", ("fp8tower.trace.report", "fp8tower.trace.report_host")),
])
def test_layers(pkg, forbidden):
    bad = {m: sorted(w for w in _reachable(m) if any(w == f or w.startswith(f + ".")
                                                    for f in forbidden))
           for m in _under(pkg)}
    bad = {m: ws for m, ws in bad.items() if ws}
    assert not bad, f"{pkg} must not import {', '.join(forbidden)}: {bad}"


def test_submodules_are_attributes_of_a_light_import():
    """`import fp8tower; fp8tower.backends.available()` works without importing the
    submodule first; the bare import loads no torch."""
    import os
    import subprocess
    import sys

    code = ("import sys, fp8tower; light = 'torch' not in sys.modules; "
            "print(light, 'reference' in [b.name for b in fp8tower.backends.available()])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**os.environ, "PYTHONPATH": str(SRC)})
    assert out.stdout.split() == ["True", "True"], out.stdout + out.stderr
