"""Every command group of ``caucus``, named here and nowhere else.

Why a list of imports and not discovery: a command group that fails to import must fail the command
line loudly, not vanish from ``--help``; and a reader finds every command's home in one place. This
module is the edge of the program: it may import every package, and no package imports it.
"""

from __future__ import annotations

from collections.abc import Callable

import typer

from ledger import config_cli, demo
from producers import cli as producers_cli
from producers.importers import cli as importers_cli
from producers.simulator import cli as simulator_cli
from projections import cli as projections_cli
from projections import feed_cli, replay_cli, schemas_cli
from projections.audit import audit_cli, diff_cli
from projections.audit import cli as evidence_cli
from projections.read_api import cli as read_api_cli

REGISTRATIONS: tuple[Callable[[typer.Typer], None], ...] = (
    config_cli.register,  # config
    producers_cli.register,  # define, open, report, correct, toss, spool, credentials, intake, serve
    importers_cli.register,  # import iowa2020
    simulator_cli.register,  # simulate
    projections_cli.register,  # project, tally, trail, projections
    replay_cli.register,  # replay
    feed_cli.register,  # subscribe
    read_api_cli.register,  # serve results
    schemas_cli.register,  # schemas export
    evidence_cli.register,  # checkpoint, verify, prove, witness
    diff_cli.register,  # diff
    audit_cli.register,  # audit, recount-package
    demo.register,  # demo
)


def register_all(app: typer.Typer) -> None:
    """Add every command group to ``app``, in the order ``--help`` lists them."""
    for register in REGISTRATIONS:
        register(app)
