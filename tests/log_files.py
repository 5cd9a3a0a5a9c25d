"""Copying and replacing an embedded log file as an operator's restore does, for the tests of restores.

``backup`` closes both connections it copies through: ``with`` on a sqlite3 connection only commits, and a
connection left open in the test's process shares the file's locks with the connections under test (an
intake opening the log again would meet an I/O error no other process would)."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

__all__ = ["backup", "remove_log", "put_in_place"]


def backup(src: Path, dst: Path) -> None:
    """A consistent copy of a live SQLite file (its WAL included), as a backup tool takes one."""
    with closing(sqlite3.connect(src)) as a, closing(sqlite3.connect(dst)) as b:
        a.backup(b)


def remove_log(log: Path) -> None:
    """The log file and its -wal and -shm beside it."""
    for suffix in ("", "-wal", "-shm"):
        log.with_name(log.name + suffix).unlink(missing_ok=True)


def put_in_place(copy: Path, log: Path) -> None:
    """Remove the log and put a copy at its path: a new file, not the one a process holds open."""
    remove_log(log)
    backup(copy, log)
