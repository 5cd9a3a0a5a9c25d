"""The embedded projection store: one SQLite file next to the embedded log.

Writers serialise on SQLite's own write lock (``BEGIN IMMEDIATE`` with a busy timeout), which is
also the per-set lock the runner's exactly-once argument needs: a batch reads positions and
processed ids and writes its changes without another writer in between. WAL mode lets ``caucus
tally`` read a consistent snapshot while a runner writes.

The event index is the one write that grows with the log (a row per event, keyed by a random
event id), so it runs on an I/O thread while the runner decodes its next records, as PostgreSQL
does in its own process. A chunk goes in as one JSON text and one statement: CPython releases the
GIL for the whole of a statement's step, so the thread never queues for the GIL row by row (as
``executemany`` would, stepping once per row).

The WAL checkpoint after a batch (copying the batch's pages into the database file) runs on that
thread too, instead of inside ``COMMIT``: the runner reads its next records from the log meanwhile,
and every later use of the connection first waits for the checkpoint to finish.

Readers (``read_only=True``: tally, trail, audit, diff...) open the file without creating or changing
anything (``ledger.sqlite_setup``); a missing store is ``StoreMissing``.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import orjson

from ledger.sqlite_setup import MissingDatabase, ReadOnlyDatabase, open_database, use_wal
from projections.stores._sql import (
    DATA_TABLES,
    EVENT_COLUMNS,
    SCHEMA_VERSION,
    SET_COLUMNS,
    HISTORY_MARK,
    NOTE_VERSION,
    TOP_VERSION,
    SqlFeedFence,
    SqlReader,
    change_rows,
    history_insert,
    history_params,
    next_version,
    now_text,
    schema_statements,
    set_info,
    upsert_statements,
    version_mismatch,
)
from projections.stores.port import (
    Changes,
    EventRow,
    SetInfo,
    SetNotFound,
    Staged,
    StoreError,
    StoreMissing,
    chunks,
    finished_params,
    not_building,
)

__all__ = ["SqliteStore"]

_UPSERTS = upsert_statements("?")
_HISTORY = history_insert("?", "MAX")
# A chunk of event-index rows arrives as one JSON array of EventRow arrays (?2); ?1 is the set id.
_REBUILD = "remove {path} (and its -wal/-shm files) and run `caucus project --until-caught-up` to rebuild it from the log"

_JSON_ROWS = "SELECT ?1, " + ", ".join(f"json_extract(value, '$[{i}]')" for i in range(7)) + " FROM json_each(?2)"
# RETURNING names the rows that went in; a row DO NOTHING skipped returns nothing: its id was held
_INSERT_JSON = (f"INSERT INTO proj_events ({EVENT_COLUMNS}) {_JSON_ROWS} WHERE true ON CONFLICT (set_id, event_id) DO NOTHING "
                "RETURNING event_id")


class _Tx(SqlReader):
    def __init__(self, set_id: int, conn: sqlite3.Connection, io: ThreadPoolExecutor | None = None) -> None:
        self._conn = conn
        self._io = io
        self._pending: Future[set[str]] | None = None
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
        if changes.history:
            self._conn.executemany(_HISTORY, history_params(self.set_id, changes))

    def index_new(self, rows: Sequence[EventRow]) -> set[str]:
        return self.index_begin(rows)()

    def index_begin(self, rows: Sequence[EventRow]) -> Callable[[], set[str]]:
        """The rows inserted, and the held ids learnt, by one statement over one JSON text, on the
        I/O thread (see module docstring); a reader's snapshot has no thread and answers at once."""
        if not rows:
            return set
        payload = orjson.dumps(list(map(tuple, rows))).decode()  # orjson takes no namedtuples
        ids = {row.event_id for row in rows}
        if self._io is None:
            held = self._index_json(payload, ids)
            return lambda: held
        pending = self._pending = self._io.submit(self._index_json, payload, ids)
        return pending.result

    def _index_json(self, payload: str, ids: set[str]) -> set[str]:
        """One statement: the held ids are those of ``rows`` (which repeat none) that did not go in."""
        return ids.difference(r[0] for r in self._conn.execute(_INSERT_JSON, (self.set_id, payload)))

    def settle(self, *, failing: bool = False) -> None:
        """Wait for an index write still running on the I/O thread: the transaction must not end
        (commit or roll back) under a statement in progress. Its error is raised here, unless the
        transaction is already failing for a reason of its own (that one is the error to report)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        if failing:
            pending.exception()
        else:
            pending.result()


class SqliteStore:
    """A ProjectionStore in one SQLite file (see module docstring)."""

    def __init__(self, path: str | Path, *, timeout: float = 60.0, read_only: bool = False) -> None:
        self.path = Path(path)
        self.read_only = read_only
        self._ro: ReadOnlyDatabase | None = None
        try:
            if str(path) == ":memory:":  # an empty store that leaves nothing behind (a tally replayed from the log)
                self._conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
                read_only = self.read_only = False
            else:
                self._conn, self._ro = open_database(self.path, timeout, read_only=read_only)
        except MissingDatabase:
            raise StoreMissing(
                f"no projection store at {self.path}: run `caucus project --until-caught-up` first (it builds the store from the log), "
                "or --data-dir / --database points elsewhere"
            ) from None
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"cannot open the projection store at {self.path}: {exc}") from exc
        self._lock = threading.RLock()
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="caucus-sqlite-io")
        self._checkpoint: Future[Any] | None = None
        if read_only:
            self._check_version()
            return
        try:
            self._set_up(timeout)
        except sqlite3.OperationalError:  # locked, full, read-only, I/O: the file is not at fault, as before
            self._conn.close()
            raise
        except sqlite3.DatabaseError as exc:  # not a database, or a damaged one
            self._conn.close()
            raise StoreError(f"the projection store at {self.path} cannot be used: {exc}. It holds nothing the log does "
                             "not: move it aside and `caucus project` builds it again from the log") from exc

    def _set_up(self, timeout: float) -> None:
        """A writer's settings and the schema (created, or checked to be this code's)."""
        use_wal(self._conn, timeout)
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute("PRAGMA cache_size=-32768")
        self._conn.execute("PRAGMA wal_autocheckpoint=0")  # see module docstring; closing checkpoints too
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                meta, rest = schema_statements()
                self._conn.execute(meta)
                row = self._conn.execute("SELECT value FROM proj_meta WHERE name = 'schema_version'").fetchone()
                if row is not None and row[0] != SCHEMA_VERSION:
                    raise StoreError(version_mismatch(row[0], f"at {self.path}", _REBUILD.format(path=self.path)))
                for stmt in rest:
                    self._conn.execute(stmt.format(id="INTEGER PRIMARY KEY", big="INTEGER"))
                if row is None:
                    self._conn.execute("INSERT INTO proj_meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def _check_version(self) -> None:
        try:
            row = self._conn.execute("SELECT value FROM proj_meta WHERE name = 'schema_version'").fetchone()
        except sqlite3.DatabaseError as exc:
            self.close()
            raise StoreError(f"{self.path} is not a projection store this code can read: {exc}") from exc
        if row is None or row[0] != SCHEMA_VERSION:
            self.close()
            raise StoreError(version_mismatch(row[0] if row else "none", f"at {self.path}", _REBUILD.format(path=self.path)))

    def describe(self) -> str:
        return f"sqlite:{self.path}"

    # -- sets ---------------------------------------------------------------------------------

    def sets(self, name: str | None = None) -> list[SetInfo]:
        with self._connection():
            if name is None:
                rows = self._conn.execute(f"SELECT {SET_COLUMNS} FROM proj_sets ORDER BY name, version").fetchall()
            else:
                rows = self._conn.execute(f"SELECT {SET_COLUMNS} FROM proj_sets WHERE name = ? ORDER BY version", (name,)).fetchall()
        return [set_info(r) for r in rows]

    def get_set(self, set_id: int) -> SetInfo:
        with self._connection():
            return self._set_in(self._conn, set_id)

    def create_set(self, name: str, *, source: str, rule_set: str | None = None, params: str = "{}") -> SetInfo:
        with self._write() as conn:
            set_id = self._insert_set(conn, name, source, rule_set, params)
        return self.get_set(set_id)

    @staticmethod
    def _insert_set(conn: sqlite3.Connection, name: str, source: str, rule_set: str | None, params: str) -> int:
        version = next_version(conn.execute(TOP_VERSION.format(ph="?"), (name, name)).fetchone())
        cur = conn.execute(
            "INSERT INTO proj_sets (name, version, state, source, rule_set, params, created_at) VALUES (?, ?, 'building', ?, ?, ?, ?)",
            (name, version, source, rule_set, params, now_text()),
        )
        conn.execute(NOTE_VERSION.format(ph="?"), (name, str(version)))
        assert cur.lastrowid is not None
        conn.execute(HISTORY_MARK.format(ph="?"), (cur.lastrowid,))
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
        with self._connection():
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

    def finish_set(self, set_id: int) -> SetInfo:
        with self._write() as conn:
            info = self._set_in(conn, set_id)
            if info.state != "building":
                raise not_building(info)
            conn.execute("UPDATE proj_sets SET params = ? WHERE set_id = ?", (finished_params(info.params, now_text()), set_id))
        return self.get_set(set_id)

    def _set_in(self, conn: sqlite3.Connection, set_id: int) -> SetInfo:
        row = conn.execute(f"SELECT {SET_COLUMNS} FROM proj_sets WHERE set_id = ?", (set_id,)).fetchone()
        if row is None:
            raise SetNotFound(f"no projection set {set_id} in {self.describe()}")
        return set_info(row)

    def drop_set(self, set_id: int) -> None:
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM proj_serving WHERE set_id = ?", (set_id,)).fetchone():
                raise StoreError(f"projection set {set_id} is serving; promote another set before dropping it")
            for table in DATA_TABLES:
                conn.execute(f"DELETE FROM {table} WHERE set_id = ?", (set_id,))
            conn.execute("DELETE FROM proj_sets WHERE set_id = ?", (set_id,))

    # -- transactions -------------------------------------------------------------------------

    @contextmanager
    def _connection(self) -> Iterator[sqlite3.Connection]:
        """The connection, held, once the checkpoint of the last batch (if any) has finished."""
        with self._lock:
            checkpoint, self._checkpoint = self._checkpoint, None
            if checkpoint is not None:
                try:
                    checkpoint.result()
                except sqlite3.Error as exc:
                    raise StoreError(f"checkpointing the projection store at {self.path} failed: {exc}") from exc
            yield self._conn

    def _checkpoint_wal(self) -> None:
        self._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if self.read_only:
            raise StoreError(f"the projection store at {self.path} was opened read-only")
        with self._connection():
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
    def transaction(self, set_id: int, staged: Staged | None = None) -> Iterator[_Tx]:
        """``staged`` is not used: nothing here is loaded apart from the writes."""
        with self._write() as conn:
            if conn.execute("SELECT 1 FROM proj_sets WHERE set_id = ?", (set_id,)).fetchone() is None:
                raise SetNotFound(f"no projection set {set_id} in {self.describe()}")
            tx = _Tx(set_id, conn, self._io)
            try:
                yield tx
            except BaseException:
                tx.settle(failing=True)
                raise
            tx.settle()
        with self._lock:
            self._checkpoint = self._io.submit(self._checkpoint_wal)

    @contextmanager
    def feed_fence(self, set_id: int) -> Iterator[SqlFeedFence]:
        """Under the file's write lock (SQLite has one): short, a feed publish of the embedded log."""
        with self._write() as conn:
            yield SqlFeedFence(set_id, _Tx(set_id, conn)._query_in, conn.executemany, "?")

    @contextmanager
    def reader(self, set_id: int) -> Iterator[_Tx]:
        with self._connection():
            self._conn.execute("BEGIN")
            try:
                yield _Tx(set_id, self._conn)
            finally:
                self._conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._io.shutdown(wait=True)  # a checkpoint under way finishes first
            if self._ro is not None:
                self._ro.close()
            else:
                self._conn.close()
