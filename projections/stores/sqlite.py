"""The embedded projection store: one SQLite file next to the embedded log.

Writers serialise on SQLite's own write lock (``BEGIN IMMEDIATE`` with a busy timeout), which is
also the per-set lock the runner's exactly-once argument needs: a batch reads positions and
processed ids and writes its changes without another writer in between. WAL mode lets ``caucus
tally`` read a consistent snapshot while a runner writes.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ledger.sqlite_setup import use_wal
from projections.stores._sql import (
    DATA_TABLES,
    SCHEMA,
    SCHEMA_VERSION,
    SET_COLUMNS,
    SqlReader,
    change_rows,
    now_text,
    set_info,
    upsert_statements,
)
from projections.stores.port import Changes, EventRow, SetInfo, SetNotFound, StoreError, chunks

__all__ = ["SqliteStore"]

_UPSERTS = upsert_statements("?")


class _Tx(SqlReader):
    def __init__(self, set_id: int, conn: sqlite3.Connection) -> None:
        self._conn = conn
        super().__init__(set_id, self._query, self._query_in, "?")

    def _query(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql, tuple(params)).fetchall()

    def _query_in(self, sql: str, params: Sequence[Any], values: Sequence[str], _col: str) -> list[tuple[Any, ...]]:
        out: list[tuple[Any, ...]] = []
        for chunk in chunks(values, 500):
            marks = ",".join("?" * len(chunk))
            out.extend(self._conn.execute(sql.replace("{in}", f"IN ({marks})"), (*params, *chunk)).fetchall())
        return out

    def write(self, changes: Changes) -> None:
        rows = change_rows(self.set_id, changes)
        for kind in ("elections", "units", "tallies", "events", "positions"):
            if rows[kind]:
                self._conn.executemany(_UPSERTS[kind], rows[kind])

    def index_new(self, rows: Sequence[EventRow]) -> set[str]:
        """A lookup, then a plain insert of the rest: in-process, cheaper than staging the rows
        through a temporary table to have one statement report what it inserted."""
        held = self.processed([r.event_id for r in rows]) if rows else set()
        sid = self.set_id
        new = [(sid, *r) for r in rows if r.event_id not in held] if held else [(sid, *r) for r in rows]
        if new:
            self._conn.executemany(_UPSERTS["events"], new)
        return held

    def index_begin(self, rows: Sequence[EventRow]) -> Callable[[], set[str]]:
        """In-process: nothing to overlap (and a thread would contend for the GIL row by row)."""
        held = self.index_new(rows)
        return lambda: held


class SqliteStore:
    """A ProjectionStore in one SQLite file (see module docstring)."""

    def __init__(self, path: str | Path, *, timeout: float = 60.0) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the projection store at {self.path}: {exc}") from exc
        self._lock = threading.RLock()
        use_wal(self._conn, timeout)
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA cache_size=-32768")
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for stmt in SCHEMA.format(id="INTEGER PRIMARY KEY", big="INTEGER").split(";"):
                    if stmt.strip():
                        self._conn.execute(stmt)
                row = self._conn.execute("SELECT value FROM proj_meta WHERE name = 'schema_version'").fetchone()
                if row is None:
                    self._conn.execute("INSERT INTO proj_meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
                elif row[0] != SCHEMA_VERSION:
                    raise StoreError(
                        f"the projection store at {self.path} has schema version {row[0]}, this code needs "
                        f"{SCHEMA_VERSION}; rebuild it with `caucus replay` into a new store"
                    )
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def describe(self) -> str:
        return f"sqlite:{self.path}"

    # -- sets ---------------------------------------------------------------------------------

    def sets(self, name: str | None = None) -> list[SetInfo]:
        with self._lock:
            if name is None:
                rows = self._conn.execute(f"SELECT {SET_COLUMNS} FROM proj_sets ORDER BY name, version").fetchall()
            else:
                rows = self._conn.execute(f"SELECT {SET_COLUMNS} FROM proj_sets WHERE name = ? ORDER BY version", (name,)).fetchall()
        return [set_info(r) for r in rows]

    def get_set(self, set_id: int) -> SetInfo:
        with self._lock:
            row = self._conn.execute(f"SELECT {SET_COLUMNS} FROM proj_sets WHERE set_id = ?", (set_id,)).fetchone()
        if row is None:
            raise SetNotFound(f"no projection set {set_id} in {self.describe()}")
        return set_info(row)

    def create_set(self, name: str, *, source: str, rule_set: str | None = None, params: str = "{}") -> SetInfo:
        with self._write() as conn:
            set_id = self._insert_set(conn, name, source, rule_set, params)
        return self.get_set(set_id)

    @staticmethod
    def _insert_set(conn: sqlite3.Connection, name: str, source: str, rule_set: str | None, params: str) -> int:
        (top,) = conn.execute("SELECT COALESCE(MAX(version), 0) FROM proj_sets WHERE name = ?", (name,)).fetchone()
        cur = conn.execute(
            "INSERT INTO proj_sets (name, version, state, source, rule_set, params, created_at) VALUES (?, ?, 'building', ?, ?, ?, ?)",
            (name, top + 1, source, rule_set, params, now_text()),
        )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def ensure_serving(self, name: str, *, source: str, rule_set: str | None = None) -> SetInfo:
        with self._write() as conn:
            row = conn.execute("SELECT set_id FROM proj_serving WHERE name = ?", (name,)).fetchone()
            if row is not None:
                set_id = int(row[0])
            else:
                set_id = self._insert_set(conn, name, source, rule_set, "{}")
                self._promote(conn, set_id)
        return self.get_set(set_id)

    def serving(self, name: str) -> SetInfo | None:
        with self._lock:
            row = self._conn.execute(
                f"SELECT {', '.join('s.' + c.strip() for c in SET_COLUMNS.split(','))} FROM proj_serving v "
                "JOIN proj_sets s ON s.set_id = v.set_id WHERE v.name = ?",
                (name,),
            ).fetchone()
        return None if row is None else set_info(row)

    def promote(self, set_id: int) -> SetInfo:
        with self._write() as conn:
            self._promote(conn, set_id)
        return self.get_set(set_id)

    def _promote(self, conn: sqlite3.Connection, set_id: int) -> None:
        row = conn.execute("SELECT name FROM proj_sets WHERE set_id = ?", (set_id,)).fetchone()
        if row is None:
            raise SetNotFound(f"no projection set {set_id} in {self.describe()}")
        name = row[0]
        conn.execute("UPDATE proj_sets SET state = 'retired' WHERE name = ? AND state = 'serving' AND set_id <> ?", (name, set_id))
        conn.execute("UPDATE proj_sets SET state = 'serving', promoted_at = ? WHERE set_id = ?", (now_text(), set_id))
        conn.execute(
            "INSERT INTO proj_serving (name, set_id) VALUES (?, ?) ON CONFLICT (name) DO UPDATE SET set_id = excluded.set_id",
            (name, set_id),
        )

    def drop_set(self, set_id: int) -> None:
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM proj_serving WHERE set_id = ?", (set_id,)).fetchone():
                raise StoreError(f"projection set {set_id} is serving; promote another set before dropping it")
            for table in DATA_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE set_id = ?", (set_id,))
            conn.execute("DELETE FROM proj_sets WHERE set_id = ?", (set_id,))

    # -- transactions -------------------------------------------------------------------------

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            try:
                self._conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                raise StoreError(f"the projection store at {self.path} is locked by another writer: {exc}") from exc
            try:
                yield self._conn
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    @contextmanager
    def transaction(self, set_id: int) -> Iterator[_Tx]:
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM proj_sets WHERE set_id = ?", (set_id,)).fetchone() is None:
                raise SetNotFound(f"no projection set {set_id} in {self.describe()}")
            yield _Tx(set_id, conn)

    @contextmanager
    def reader(self, set_id: int) -> Iterator[_Tx]:
        with self._lock:
            self._conn.execute("BEGIN")
            try:
                yield _Tx(set_id, self._conn)
            finally:
                self._conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._conn.close()
