"""Opening a SQLite file that several processes may be creating at the same moment.

Why this needs care: ``CREATE TABLE IF NOT EXISTS`` in autocommit mode first reads the schema, then
upgrades to a write lock. If another connection is creating the same file just then, SQLite answers
"database is locked" at once instead of waiting (waiting could deadlock two such upgrades). Taking
the write lock first (``BEGIN IMMEDIATE``) makes the second opener wait like any writer. Switching a
new file to WAL mode can be refused the same way while another opener holds it, so it is retried.

Reading without writing (``connect_read_only``): commands that only read (tally, audit, verify, ...)
must work on a copy nobody may write (a read-only directory, an auditor's archive) and must not
create or change a file, not even SQLite's own. A read-only connection to a WAL database still
creates the ``-wal`` and ``-shm`` files when they are missing, and cannot remove them when it
closes; so when it had to create them, a second, read-write connection is opened after it closed
and closed at once: SQLite removes both files when the last connection to the database closes, and
leaves them alone while another process (a runner writing meanwhile) still has it open. Where the
file cannot change at all (its directory or file is not writable, or the file system is read-only)
the database is opened ``immutable=1``, which takes no locks and needs no ``-shm`` file (a reader in a
directory it may not write, while a writer works there, shares the writer's ``-shm`` instead).
"""

from __future__ import annotations

import os
import sqlite3
import time
from pathlib import Path
from urllib.parse import quote

from ledger.files import create_private

__all__ = ["use_wal", "create_schema", "connect_read_only", "ReadOnlyDatabase", "connect_private", "MissingDatabase",
           "open_database"]


class MissingDatabase(FileNotFoundError):
    """A database a reader needs is not there (nothing was ever written, or the path is wrong)."""


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


def connect_private(path: Path, timeout: float) -> sqlite3.Connection:
    """A read-write connection; a new database file is created with the data-file mode first
    (``ledger.files``), so it and its ``-wal``/``-shm`` files are private."""
    create_private(path)
    return sqlite3.connect(str(path), timeout=timeout, isolation_level=None, check_same_thread=False)


def _unchangeable(path: Path) -> bool:
    """True when no process can be writing ``path`` now: a read-only file system, or a directory this
    process may not write in which no writer has its ``-shm`` file (a writer has one while it works; a
    reader that may not create one must then read the file as it is). Root ignores permissions, so for
    root only a read-only mount counts. Where a writer is at work, the reader shares its ``-shm``."""
    try:
        if os.statvfs(path).f_flag & os.ST_RDONLY:
            return True
    except OSError:
        return False
    shm = path.with_name(path.name + "-shm")
    return not os.access(path.parent, os.W_OK) and not shm.exists()


class ReadOnlyDatabase:
    """A read-only connection to an existing database that leaves no file behind (module docstring).

    ``conn`` is the connection; ``close()`` closes it and removes the ``-wal``/``-shm`` files it had
    to create, when no other connection uses them."""

    def __init__(self, path: Path, timeout: float) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise MissingDatabase(str(self.path))
        uri = "file:" + quote(str(self.path.resolve()))
        self.immutable = _unchangeable(self.path)
        wal = self.path.with_name(self.path.name + "-wal")
        self._made_wal = not self.immutable and not wal.exists()
        try:
            self.conn = sqlite3.connect(
                f"{uri}?{'immutable=1' if self.immutable else 'mode=ro'}",
                uri=True, timeout=timeout, isolation_level=None, check_same_thread=False,
            )
            self.conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.OperationalError:
            if self.immutable:
                raise
            # e.g. a directory this process may not write into (no -shm can be made): then nothing
            # else can make one either, and the file cannot change under the reader.
            self.immutable, self._made_wal = True, False
            self.conn = sqlite3.connect(f"{uri}?immutable=1", uri=True, timeout=timeout, isolation_level=None,
                                        check_same_thread=False)
            self.conn.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()

    def close(self) -> None:
        self.conn.close()
        if not self._made_wal:
            return
        self._made_wal = False
        try:
            tidy = sqlite3.connect(f"file:{quote(str(self.path.resolve()))}?mode=rw", uri=True, timeout=1.0,
                                   isolation_level=None)
        except sqlite3.Error:
            return
        try:
            tidy.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall()  # joins the WAL, writes nothing
        except sqlite3.Error:
            pass
        finally:
            tidy.close()


def connect_read_only(path: Path, timeout: float = 30.0) -> ReadOnlyDatabase:
    """See ``ReadOnlyDatabase``; MissingDatabase if the file does not exist (nothing is created)."""
    return ReadOnlyDatabase(path, timeout)


def open_database(path: Path, timeout: float, *, read_only: bool) -> tuple[sqlite3.Connection, ReadOnlyDatabase | None]:
    """The connection an adapter works with, and the read-only handle to close it by (None when it may
    write): ``connect_read_only`` for readers, ``connect_private`` otherwise."""
    if read_only:
        handle = ReadOnlyDatabase(path, timeout)
        return handle.conn, handle
    return connect_private(path, timeout), None
