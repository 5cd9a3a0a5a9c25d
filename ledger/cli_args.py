"""What happens around a command line before and after its command runs: options of ``caucus`` itself
given where a person would give them, and a stop asked for by a signal.

Why apart from ``ledger.cli``: neither depends on any command; both are about the process and its
arguments, and the command tree's module stays about the commands.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from typer._click import exceptions as click_errors
from typer._click.core import Command

__all__ = ["Terminated", "hoist_wide", "name_the_place_of_a_global_option", "terminate_as_interrupt"]


def hoist_wide(argv: list[str]) -> list[str]:
    """``--wide`` is a global option that may be given anywhere: move it before the command."""
    if "--wide" not in argv:
        return argv
    cut = argv.index("--") if "--" in argv else len(argv)
    if "--wide" not in argv[:cut]:
        return argv
    rest = [a for a in argv[:cut] if a != "--wide"]
    return ["--wide", *rest, *argv[cut:]]


def name_the_place_of_a_global_option(exc: click_errors.UsageError, root: Command) -> None:
    """``caucus tally --data-dir D`` is the likeliest slip: say where the option goes, instead of only
    that the command has no such option (or a look-alike of its own, as ``--data`` for ``--data-dir``)."""
    name = getattr(exc, "option_name", None)
    if not isinstance(exc, click_errors.NoSuchOption) or not name:
        return
    if any(name == opt for param in root.params for opt in param.opts):
        exc.message += f"; {name} is an option of caucus itself: give it before the command (caucus {name} ... COMMAND)"
        exc.possibilities = None


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the command is: it unwinds as Ctrl-C does (exit 143 instead of 130)."""


@contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """A command stopped by SIGTERM (``timeout``, a service manager) ends as one stopped by Ctrl-C: its
    transactions rolled back and its files closed, so a follower such as ``caucus subscribe`` leaves no
    ``-wal``/``-shm`` beside a file it only read. Commands that handle signals themselves (``project``,
    the HTTP services) set their own handlers over this one; the one it replaced is put back after."""

    def terminated(signum: int, frame: Any) -> None:
        raise Terminated()

    try:
        before = signal.signal(signal.SIGTERM, terminated)
    except ValueError:  # not the main thread (an embedding program): leave its signals alone
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, before)
