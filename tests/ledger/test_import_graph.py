"""The layering CONTRIBUTING.md promises, read from the source: who may import whom.

Every import counts, also one inside a function (a lazy import is still a dependency). The edge of the
program (the ``caucus`` command, its list of command groups, the demo) may import every package; the
core of ``ledger`` imports neither ``producers`` nor ``projections``; those two do not import each other;
no package imports the development tooling in ``infra``; the caucus math imports only the standard
library's pure modules and itself, and its modules form no cycle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ledger", "producers", "projections", "infra")
EDGE = {"ledger.cli", "ledger.commands", "ledger.demo"}
PURE_STDLIB = {
    "__future__", "collections", "dataclasses", "decimal", "enum", "fractions", "functools", "itertools",
    "math", "operator", "typing", "types", "re",
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports() -> dict[str, set[str]]:
    """Module -> the modules it imports (absolute names), for every module of the packages."""
    graph: dict[str, set[str]] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            name = _module_name(path)
            is_package = path.name == "__init__.py"
            found: set[str] = set()
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    found.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        base = name.split(".")
                        base = base[: len(base) - node.level + (1 if is_package else 0)]
                        target = ".".join([*base, *([node.module] if node.module else [])])
                    else:
                        target = node.module or ""
                    found.add(target)
                    # `from pkg import module` imports a module too.
                    found.update(f"{target}.{alias.name}" for alias in node.names)
            graph[name] = found
    return graph


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return _imports()


def _top(name: str) -> str:
    return name.split(".")[0]


def _layer(name: str) -> str:
    if name in EDGE:
        return "edge"
    return _top(name)


def test_the_graph_is_read(graph: dict[str, set[str]]) -> None:
    assert {"ledger.caucus_math.allocation", "ledger.cli", "producers.intake", "projections.runner"} <= graph.keys()
    assert "ledger.caucus_math._core" in graph["ledger.caucus_math.allocation"]


def test_layers_depend_one_way(graph: dict[str, set[str]]) -> None:
    allowed = {
        "ledger": {"ledger"},
        "producers": {"ledger", "producers"},
        "projections": {"ledger", "projections"},
        "infra": {"infra"},
        "edge": {"ledger", "producers", "projections", "edge"},
    }
    wrong = sorted(
        f"{module} imports {target}"
        for module, targets in graph.items()
        for target in targets
        if _top(target) in PACKAGES and _layer(target) not in allowed[_layer(module)]
    )
    assert wrong == []


def test_no_package_cycle(graph: dict[str, set[str]]) -> None:
    edges: dict[str, set[str]] = defaultdict(set)
    for module, targets in graph.items():
        for target in targets:
            if _top(target) in PACKAGES and _layer(target) != _layer(module):
                edges[_layer(module)].add(_layer(target))
    assert _cycles(edges) == []


def test_the_caucus_math_is_pure_and_acyclic(graph: dict[str, set[str]]) -> None:
    math = {m: t for m, t in graph.items() if m.startswith("ledger.caucus_math")}
    outside = sorted(
        f"{module} imports {target}"
        for module, targets in math.items()
        for target in targets
        if not target.startswith("ledger.caucus_math") and _top(target) not in PURE_STDLIB
    )
    assert outside == []
    edges = {m: {t for t in targets if t in math and t != "ledger.caucus_math"} for m, targets in math.items()}
    assert _cycles(edges) == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Every cycle found by a depth-first walk (empty when the graph is a DAG)."""
    found: list[list[str]] = []
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                found.append([*stack[stack.index(nxt):], nxt])
            elif nxt not in state:
                visit(nxt)
        stack.pop()
        state[node] = 2

    for node in sorted(edges):
        if node not in state:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []
