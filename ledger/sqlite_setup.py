"""Opening a SQLite file that several processes may be creating at the same moment.

Why this needs care: ``CREATE TABLE IF NOT EXISTS`` in autocommit mode first reads the schema, then
upgrades to a write lock. If another connection is creating the same file just then, SQLite answers
"database is locked" at once instead of waiting (waiting could deadlock two such upgrades). Taking
the write lock first (``BEGIN IMMEDIATE``) makes the second opener wait like any writer. Switching a
new file to WAL mode can be refused the same way while another opener holds it, so it is retried.
"""

from __future__ import annotations

import sqlite3
import time

__all__ = ["use_wal", "create_schema"]


def use_wal(conn: sqlite3.Connection, timeout: float) -> None:
    """``PRAGMA journal_mode=WAL``, retried while another connection holds the file (up to ``timeout`` s)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            if not _busy(exc) or time.monotonic() >= deadline:
                raise
            time.sleep(0.01)


def create_schema(conn: sqlite3.Connection, script: str) -> None:
    """Run a schema script (``IF NOT EXISTS`` statements, triggers included) in one write transaction."""
    try:
        conn.executescript(f"BEGIN IMMEDIATE;\n{script}\n;COMMIT;")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _busy(exc: sqlite3.OperationalError) -> bool:
    text = str(exc).lower()
    return "locked" in text or "busy" in text
