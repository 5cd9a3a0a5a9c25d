"""Modules stay small and functions short, so the structure shows the design (CONTRIBUTING: "modules small
and named after what they do").

Two limits over ``ledger/``, ``producers/`` and ``projections/``: no module over 500 lines, no function
over 80 lines. A typer command function in a ``*cli*.py`` module is exempt from the function limit: its
parameters are the command's options, one per line, and it reads best whole.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("ledger", "producers", "projections")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80

# Shipped whole: copied into every recount package as its one standalone ``verify.py``, which imports
# nothing from the ledger so that an auditor can read all of it in one file. Its functions keep the limit.
SHIPPED_WHOLE = frozenset({"projections/audit/recount_verify.py"})


def _modules() -> list[Path]:
    return sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))


def _name(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _command_functions(tree: ast.Module) -> set[str]:
    """Functions registered with typer: ``@group.command(...)`` or ``group.command(...)(function)``."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for deco in node.decorator_list:
                if isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.func.attr == "command":
                    names.add(node.name)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Call)
            and isinstance(node.func.func, ast.Attribute)
            and node.func.func.attr == "command"
        ):
            names.update(arg.id for arg in node.args if isinstance(arg, ast.Name))
    return names


def _long_functions(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    exempt = _command_functions(tree) if "cli" in path.name else set()
    found = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name not in exempt:
            assert node.end_lineno is not None
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES:
                found.append(f"{_name(path)}:{node.lineno} {node.name} has {length} lines")
    return found


def test_the_packages_are_measured() -> None:
    names = {_name(p) for p in _modules()}
    assert "ledger/log/kafka/_log.py" in names and "producers/cli.py" in names and "projections/tally.py" in names
    assert SHIPPED_WHOLE <= names


def test_no_module_over_the_limit() -> None:
    too_long = []
    for path in _modules():
        name = _name(path)
        if name in SHIPPED_WHOLE:
            continue
        lines = len(path.read_text(encoding="utf-8").splitlines())
        if lines > MAX_MODULE_LINES:
            too_long.append(f"{name} has {lines} lines")
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines; split them by concern: {too_long}"


def test_no_function_over_the_limit() -> None:
    too_long = [f for path in _modules() for f in _long_functions(path)]
    assert not too_long, f"functions over {MAX_FUNCTION_LINES} lines: {too_long}"


@pytest.mark.parametrize(
    ("source", "exempt"),
    [
        ('@app.command("x")\ndef x() -> None: ...\n', {"x"}),
        ("def y() -> None: ...\ndef register(app):\n    app.command('y')(y)\n", {"y"}),
        ("def helper() -> None: ...\n", set()),
    ],
)
def test_command_functions_are_recognised(source: str, exempt: set[str]) -> None:
    assert _command_functions(ast.parse(source)) == exempt
