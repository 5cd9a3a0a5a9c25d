"""Every command group of ``caucus``, named here and nowhere else.

Why a table of modules and the commands each adds: a command line imports only the modules of the
command it names (``register_for``), so ``caucus tally`` does not pay for the intake, the importer and
the audit at start-up; ``--help``, and anything that names no known command, still gets them all. Why
not discovery: a command group that fails to import must fail the command line loudly, not vanish from
``--help``; a reader finds every command's home in one place; and a test holds the table to what each
module registers. This module is the edge of the program: it may import every package, and no package
imports it.
"""

from __future__ import annotations

from importlib import import_module

import typer

COMMANDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("ledger.config_cli", ("config",)),
    ("producers.cli", ("define", "open", "report", "correct", "toss", "spool", "credentials", "intake", "serve")),
    ("producers.importers.cli", ("import",)),
    ("producers.simulator.cli", ("simulate",)),
    ("projections.cli", ("project", "tally", "trail", "projections")),
    ("projections.replay_cli", ("replay",)),
    ("projections.feed_cli", ("subscribe",)),
    ("projections.feed_check_cli", ("check-feed",)),
    ("projections.read_api.cli", ("serve",)),
    ("projections.schemas_cli", ("schemas",)),
    ("projections.audit.cli", ("checkpoint", "verify", "prove", "witness")),
    ("projections.audit.diff_cli", ("diff",)),
    ("projections.audit.audit_cli", ("audit", "recount-package")),
    ("ledger.demo", ("demo",)),
)
"""Each module with a ``register(app)`` and the top-level commands it adds, in ``--help``'s order."""

_done: set[str] = set()


def register_all(app: typer.Typer) -> None:
    """Add every command group to ``app``, in the order ``--help`` lists them."""
    _register(app, [module for module, _ in COMMANDS])


DRIVES_OTHERS = frozenset({"demo"})
"""Commands that run other commands in-process (``caucus demo`` runs the steps a user would type)."""


def register_for(app: typer.Typer, name: str | None) -> None:
    """Add the command groups that define the command ``name``, or all of them when no group does
    (``--help``, a mistyped command: click then lists every command, or suggests one) or when the
    command drives others (``DRIVES_OTHERS``)."""
    wanted = [module for module, names in COMMANDS if name in names and name not in DRIVES_OTHERS]
    _register(app, wanted or [module for module, _ in COMMANDS])


def _register(app: typer.Typer, modules: list[str]) -> None:
    """Once per module and process: ``main`` may run more than once in one process (tests)."""
    for module in modules:
        if module not in _done:
            _done.add(module)
            import_module(module).register(app)
