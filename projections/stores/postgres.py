"""The PostgreSQL projection store (psycopg 3).

A batch transaction first locks its set's row in ``proj_sets`` (``SELECT ... FOR UPDATE``): runners
of one set, on any machine, commit one after another, and because PostgreSQL's READ COMMITTED gives
every later statement a fresh snapshot, the positions, processed ids and election definitions a
batch reads under that lock are the latest committed ones. New event-index rows go in with
``COPY`` through a temporary table (``index_new``), and so do unit states, tallies and history rows
(``pg_bulk``: the lock is held for less time); the few other rows with ``executemany`` (pipelined by
psycopg); only changed rows are sent.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

import psycopg

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
    next_version,
    now_text,
    schema_statements,
    set_info,
    upsert_statements,
    version_mismatch,
)
from projections.stores.bi_views import BI_VIEWS_VERSION, bi_view_statements
from projections.stores.pg_bulk import STAGING as BULK_STAGING
from projections.stores.pg_bulk import copy_rows, move_rows
from projections.stores.port import (
    Changes,
    EventRow,
    SetInfo,
    SetNotFound,
    Staged,
    StoreError,
    StoreUnavailable,
    finished_params,
    not_building,
)

__all__ = ["PostgresStore"]

_UPSERTS = upsert_statements("%s")
_REBUILD = "drop its proj_* tables (or point --database at a new database) and run `caucus project --until-caught-up`"
_CREATED = re.compile(r"CREATE (?:TABLE|INDEX) IF NOT EXISTS (\w+)", re.IGNORECASE)
_SCHEMA_LOCK = 0x0CA0C05  # advisory lock key: two processes creating the schema at once
_FEED_LOCK = 0x0CAFEED << 32  # plus the set id: the advisory lock of a set's feed fence
# Per connection: a batch's new index rows are bulk-loaded here (no index, so cheap), then moved into
# proj_events with ON CONFLICT DO NOTHING; RETURNING names those that went in, the rest were held.
_STAGING = """CREATE TEMP TABLE IF NOT EXISTS proj_events_in (
    set_id BIGINT NOT NULL, event_id TEXT NOT NULL, unit_key TEXT NOT NULL, election_id TEXT NOT NULL,
    part INTEGER NOT NULL, log_offset BIGINT NOT NULL, type TEXT NOT NULL, recorded_at TEXT NOT NULL
) ON COMMIT DELETE ROWS"""  # emptied at each commit, as pg_bulk's staging tables are
_COPY_STAGED = f"COPY proj_events_in ({EVENT_COLUMNS}) FROM STDIN"
_MOVE_STAGED = (
    f"WITH moved AS (DELETE FROM proj_events_in RETURNING {EVENT_COLUMNS}) "
    f"INSERT INTO proj_events ({EVENT_COLUMNS}) SELECT {EVENT_COLUMNS} FROM moved "
    "ON CONFLICT (set_id, event_id) DO NOTHING RETURNING event_id"
)


# The tables a batch writes, and the rows written before statistics are first gathered
# (``PostgresStore._gather_statistics``).
_STATISTICS = "ANALYZE proj_unit_states, proj_unit_tallies, proj_events"
_FIRST_STATISTICS = 1_000
# ANALYZE waits for a lock another ANALYZE or a VACUUM holds (another runner's statistics, an
# anti-wraparound vacuum) while this store's lock is held: the runner's next batch would wait with it.
_STATISTICS_LOCK_TIMEOUT = "SET LOCAL lock_timeout = '1s'"

# Rows of a list of keys, one index probe per key. ``col = ANY(%s)`` leaves the choice to the planner, and
# on a set it has no statistics for (a table filled since the last ANALYZE: every rebuild, every new
# set) it takes the keys' leading columns (set, election) for a handful of rows and filters the list
# over all of them: every unit state of the set read per batch, a rebuild quadratic in units. The
# lateral subquery (kept apart by OFFSET 0) is probed by the whole primary key, whatever the statistics.
_PROBE = "SELECT t.* FROM unnest(%s::text[]) AS k(v) CROSS JOIN LATERAL ({query} OFFSET 0) AS t"


class _Tx(SqlReader):
    def __init__(self, set_id: int, conn: psycopg.Connection[Any], io: ThreadPoolExecutor) -> None:
        self._conn = conn
        self._io = io
        self._made: set[str] = set()  # the staging tables' statements run in this transaction (``_stage``)
        self._loaded: Staged | None = None  # what ``load`` copied into the staging tables
        self._loaded_rows: dict[str, list[tuple[Any, ...]]] = {}
        self._taken: set[str] = set()  # the parts of ``_loaded`` written (``_take_loaded``)
        self.written = 0  # unit, tally and index rows (``PostgresStore._gather_statistics``)
        super().__init__(set_id, self._query, self._query_in, "%s")

    def _query(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        return self._conn.execute(sql, tuple(params)).fetchall()

    def _query_in(self, sql: str, params: Sequence[Any], values: Sequence[str], col: str) -> list[tuple[Any, ...]]:
        """``sql`` (``SELECT ... WHERE ... AND col {in}``) for each value by itself (``_PROBE``); where no
        column is named, the list in one ``= ANY`` (see ``SqlReader._keyed``)."""
        if not col:
            return self._conn.execute(sql.replace("{in}", "= ANY(%s)"), (*params, list(values))).fetchall()
        return self._conn.execute(_PROBE.format(query=sql.replace("{in}", "= k.v")), (list(dict.fromkeys(values)), *params)).fetchall()

    def load(self, staged: Staged) -> None:
        """Copy a batch's bulk rows and index rows into the connection's staging tables, before the
        set's lock is taken (``PostgresStore.transaction``): under it, ``write`` and ``index_begin`` given
        these same objects only move them. A rollback empties the staging tables with the rest."""
        rows = change_rows(self.set_id, staged.changes)
        with self._conn.cursor() as cur:
            self._stage(cur, BULK_STAGING)
            copy_rows(cur, self.set_id, staged.changes, rows)
            self._copy_index(cur, staged.index_rows)
        self._loaded, self._loaded_rows = staged, rows

    def _take_loaded(self, part: str, given: object) -> bool:
        """Whether ``given`` is what ``load`` copied (then it is taken: copied once, moved once). Any
        other rows first would be moved with the loaded ones, so they are refused."""
        if self._loaded is None or part in self._taken:
            return False
        if given is not getattr(self._loaded, part):
            raise StoreError(f"this transaction was given its {part} before the lock (staged); it must write those first")
        self._taken.add(part)
        return True

    def _stage(self, cur: psycopg.Cursor[Any], create: str) -> None:
        """Run a ``CREATE TEMP TABLE IF NOT EXISTS`` once per transaction: a temporary table lives as long
        as the connection, and a reconnect (``_guarded``) gives another."""
        if create not in self._made:
            cur.execute(create)
            self._made.add(create)

    def write(self, changes: Changes) -> None:
        """The few rows of elections, positions and (folded under the lock) events row by row; unit
        states, tallies and history as sets (``pg_bulk``), copied now unless ``load`` did."""
        loaded = self._take_loaded("changes", changes)
        rows = self._loaded_rows if loaded else change_rows(self.set_id, changes)
        self.written += len(rows["units"]) + len(rows["tallies"])
        with self._conn.cursor() as cur:
            for kind in ("elections", "events", "positions"):
                if rows[kind]:
                    cur.executemany(_UPSERTS[kind], rows[kind])
            if rows["units"] or rows["tallies"] or changes.history:
                if not loaded:
                    self._stage(cur, BULK_STAGING)
                    copy_rows(cur, self.set_id, changes, rows)
                move_rows(cur, changes, rows)

    def index_new(self, rows: Sequence[EventRow]) -> set[str]:
        return self.index_begin(rows)()

    def _copy_index(self, cur: psycopg.Cursor[Any], rows: Sequence[EventRow]) -> None:
        if rows:
            self._stage(cur, _STAGING)
            sid = self.set_id
            with cur.copy(_COPY_STAGED) as copy:
                for row in rows:
                    copy.write_row((sid, *row))

    def index_begin(self, rows: Sequence[EventRow]) -> Callable[[], set[str]]:
        """``COPY`` into a temporary table (unless ``load`` did), then one statement moves the rows into
        the index and returns those that went in: no id list is sent, looked up and sent back
        separately. That statement runs on the store's I/O thread, which waits for the server without
        holding the GIL, so the runner decodes its next records while PostgreSQL inserts these."""
        if not rows:
            return set
        self.written += len(rows)
        if not self._take_loaded("index_rows", rows):
            with self._conn.cursor() as cur:
                self._copy_index(cur, rows)
        ids = [r.event_id for r in rows]
        conn = self._conn

        def move() -> set[str]:
            with conn.cursor() as cur:
                return {r[0] for r in cur.execute(_MOVE_STAGED).fetchall()}

        running = self._io.submit(move)
        return lambda: set(ids).difference(running.result())


class PostgresStore:
    """A ProjectionStore in a PostgreSQL database (see module docstring)."""

    def __init__(self, dsn: str, *, connect_timeout: int = 5) -> None:
        self.dsn = dsn
        self._connect_timeout = connect_timeout
        try:
            self._live = psycopg.connect(dsn, autocommit=True, connect_timeout=connect_timeout)
        except psycopg.Error as exc:
            raise StoreError(f"cannot connect to the projection store database: {exc}") from exc
        self._lock = threading.RLock()
        self._io = ThreadPoolExecutor(max_workers=1, thread_name_prefix="caucus-pg-io")
        self._written = self._analysed_at = 0  # rows written by this store's batches, and when last analysed
        with self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
            meta, rest = schema_statements()
            self._conn.execute(meta)
            row = self._conn.execute("SELECT value FROM proj_meta WHERE name = 'schema_version'").fetchone()
            if row is not None and row[0] != SCHEMA_VERSION:
                raise StoreError(version_mismatch(row[0], "in this database", _REBUILD))
            if _missing_relations(self._conn, rest):
                for stmt in rest:
                    self._conn.execute(stmt.format(id="BIGINT GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY", big="BIGINT"))
            if row is None:
                self._conn.execute("INSERT INTO proj_meta VALUES ('schema_version', %s)", (SCHEMA_VERSION,))
            views = self._conn.execute("SELECT value FROM proj_meta WHERE name = 'bi_views'").fetchone()
            if views is None or views[0] != BI_VIEWS_VERSION:
                for stmt in bi_view_statements():
                    self._conn.execute(stmt)
                self._conn.execute(
                    "INSERT INTO proj_meta VALUES ('bi_views', %s) ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value",
                    (BI_VIEWS_VERSION,),
                )

    @property
    def _conn(self) -> psycopg.Connection[Any]:
        """The connection, opened again if the server dropped it (a restart): every call after an
        outage starts on a fresh connection, and ``transaction`` turns the outage itself into
        ``StoreUnavailable`` so that the runner can retry its batch."""
        if self._live.closed or self._live.broken:
            try:
                self._live = psycopg.connect(self.dsn, autocommit=True, connect_timeout=self._connect_timeout)
            except psycopg.OperationalError as exc:
                raise StoreUnavailable(f"cannot reconnect to the projection store database: {_first_line(exc)}") from exc
        return self._live

    @contextmanager
    def _guarded(self) -> Iterator[psycopg.Connection[Any]]:
        """The connection, under the store's lock, for work a running runner does: the server going
        away meanwhile becomes ``StoreUnavailable`` (other errors pass unchanged)."""
        with self._lock:
            conn = self._conn
            try:
                yield conn
            except psycopg.OperationalError as exc:
                if conn.closed or conn.broken:
                    raise StoreUnavailable(f"the projection store database went away mid-transaction: {_first_line(exc)}") from exc
                raise

    def describe(self) -> str:
        info = self._live.info
        return f"postgresql://{info.user}@{info.host}:{info.port}/{info.dbname}"

    # -- sets ---------------------------------------------------------------------------------

    def sets(self, name: str | None = None) -> list[SetInfo]:
        with self._lock:
            if name is None:
                rows = self._conn.execute(f"SELECT {SET_COLUMNS} FROM proj_sets ORDER BY name, version").fetchall()
            else:
                rows = self._conn.execute(f"SELECT {SET_COLUMNS} FROM proj_sets WHERE name = %s ORDER BY version", (name,)).fetchall()
        return [set_info(r) for r in rows]

    def get_set(self, set_id: int) -> SetInfo:
        with self._guarded() as conn:  # a replay's last steps wait out an outage (``replay._waiting_out``)
            row = conn.execute(f"SELECT {SET_COLUMNS} FROM proj_sets WHERE set_id = %s", (set_id,)).fetchone()
        if row is None:
            raise SetNotFound(f"no projection set {set_id} in {self.describe()}")
        return set_info(row)

    def _insert_set(self, name: str, source: str, rule_set: str | None, params: str) -> int:
        # Serialise version numbering per name.
        self._conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_SCHEMA_LOCK, name))
        top = self._conn.execute(TOP_VERSION.format(ph="%s"), (name, name)).fetchone()
        assert top is not None
        version = next_version(top)
        row = self._conn.execute(
            "INSERT INTO proj_sets (name, version, state, source, rule_set, params, created_at) "
            "VALUES (%s, %s, 'building', %s, %s, %s, %s) RETURNING set_id",
            (name, version, source, rule_set, params, now_text()),
        ).fetchone()
        assert row is not None
        self._conn.execute(NOTE_VERSION.format(ph="%s"), (name, str(version)))
        self._conn.execute(HISTORY_MARK.format(ph="%s"), (int(row[0]),))
        return int(row[0])

    def create_set(self, name: str, *, source: str, rule_set: str | None = None, params: str = "{}") -> SetInfo:
        with self._lock, self._conn.transaction():
            set_id = self._insert_set(name, source, rule_set, params)
        return self.get_set(set_id)

    def ensure_serving(self, name: str, *, source: str, rule_set: str | None = None) -> SetInfo:
        with self._lock, self._conn.transaction():
            self._conn.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_SCHEMA_LOCK, name))
            row = self._conn.execute("SELECT set_id FROM proj_serving WHERE name = %s", (name,)).fetchone()
            if row is not None:
                set_id = int(row[0])
            else:
                set_id = self._insert_set(name, source, rule_set, "{}")
                self._promote(set_id)
        return self.get_set(set_id)

    def serving(self, name: str) -> SetInfo | None:
        cols = ", ".join("s." + c.strip() for c in SET_COLUMNS.split(","))
        with self._guarded() as conn:  # asked between batches by a running runner
            row = conn.execute(
                f"SELECT {cols} FROM proj_serving v JOIN proj_sets s ON s.set_id = v.set_id WHERE v.name = %s", (name,)
            ).fetchone()
        return None if row is None else set_info(row)

    def promote(self, set_id: int) -> SetInfo:
        with self._guarded() as conn, conn.transaction():
            self._promote(set_id)
        return self.get_set(set_id)

    def _promote(self, set_id: int) -> None:
        row = self._conn.execute("SELECT name FROM proj_sets WHERE set_id = %s FOR UPDATE", (set_id,)).fetchone()
        if row is None:
            raise SetNotFound(f"no projection set {set_id} in {self.describe()}")
        name = row[0]
        self._conn.execute(
            "UPDATE proj_sets SET state = 'retired' WHERE name = %s AND state = 'serving' AND set_id <> %s", (name, set_id)
        )
        self._conn.execute("UPDATE proj_sets SET state = 'serving', promoted_at = %s WHERE set_id = %s", (now_text(), set_id))
        self._conn.execute(
            "INSERT INTO proj_serving (name, set_id) VALUES (%s, %s) ON CONFLICT (name) DO UPDATE SET set_id = excluded.set_id",
            (name, set_id),
        )

    def finish_set(self, set_id: int) -> SetInfo:
        with self._guarded() as conn, conn.transaction():
            row = conn.execute(f"SELECT {SET_COLUMNS} FROM proj_sets WHERE set_id = %s FOR UPDATE", (set_id,)).fetchone()
            if row is None:
                raise SetNotFound(f"no projection set {set_id} in {self.describe()}")
            info = set_info(row)
            if info.state != "building":
                raise not_building(info)
            conn.execute("UPDATE proj_sets SET params = %s WHERE set_id = %s", (finished_params(info.params, now_text()), set_id))
        return self.get_set(set_id)

    def drop_set(self, set_id: int) -> None:
        with self._lock, self._conn.transaction():
            if self._conn.execute("SELECT 1 FROM proj_serving WHERE set_id = %s", (set_id,)).fetchone():
                raise StoreError(f"projection set {set_id} is serving; promote another set before dropping it")
            self._conn.execute("SELECT 1 FROM proj_sets WHERE set_id = %s FOR UPDATE", (set_id,))
            for table in DATA_TABLES:
                self._conn.execute(f"DELETE FROM {table} WHERE set_id = %s", (set_id,))
            self._conn.execute("DELETE FROM proj_sets WHERE set_id = %s", (set_id,))

    # -- transactions -------------------------------------------------------------------------

    @contextmanager
    def transaction(self, set_id: int, staged: Staged | None = None) -> Iterator[_Tx]:
        """``staged`` is copied into the connection's staging tables before the set's row is locked
        (``_Tx.load``): the lock then covers only the check, the moves and the commit."""
        with self._guarded() as conn:
            with conn.transaction():
                tx = _Tx(set_id, conn, self._io)
                if staged is not None:
                    tx.load(staged)
                if conn.execute("SELECT set_id FROM proj_sets WHERE set_id = %s FOR UPDATE", (set_id,)).fetchone() is None:
                    raise SetNotFound(f"no projection set {set_id} in {self.describe()}")
                yield tx
            self._gather_statistics(conn, tx.written)

    def _gather_statistics(self, conn: psycopg.Connection[Any], written: int) -> None:
        """ANALYZE the tables a batch writes each time what this store has written doubles (from
        ``_FIRST_STATISTICS`` rows on). A rebuild is a bulk load, and autovacuum gathers statistics
        a minute or more after it has begun: until then the planner takes the set's key columns
        (set, election) for a handful of rows, and reads a list of keys by filtering them over every
        row of the set (``SqlReader._keyed``: tallies by key, for the results feed, each batch)."""
        self._written += written
        if self._written >= max(_FIRST_STATISTICS, 2 * self._analysed_at):
            self._analysed_at = self._written
            try:
                with conn.transaction():
                    conn.execute(_STATISTICS_LOCK_TIMEOUT)
                    conn.execute(_STATISTICS)
            except psycopg.Error:
                pass  # the batch has committed; statistics only speed up later reads (and autovacuum gathers them too)

    @contextmanager
    def feed_fence(self, set_id: int) -> Iterator[SqlFeedFence]:
        """An advisory lock per set, not the set's row: runners publish one at a time while batches
        (which lock the row) go on."""
        with self._guarded() as conn, conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock(%s)", (_FEED_LOCK + set_id,))
            tx = _Tx(set_id, conn, self._io)
            yield SqlFeedFence(set_id, tx._query_in, lambda sql, rows: conn.cursor().executemany(sql, rows), "%s")

    @contextmanager
    def reader(self, set_id: int) -> Iterator[_Tx]:
        with self._guarded() as conn, conn.transaction():
            conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield _Tx(set_id, conn, self._io)

    def close(self) -> None:
        with self._lock:
            self._io.shutdown(wait=True)
            self._live.close()


def _missing_relations(conn: psycopg.Connection[Any], statements: Sequence[str]) -> bool:
    """Whether any table or index the statements create is missing.

    Why not simply run them: ``CREATE INDEX IF NOT EXISTS`` takes a SHARE lock on its table before it
    finds the index there, and holds it to the end of the schema transaction. A runner that starts
    while another runner of the same store is mid-batch (a consumer group scaling out) then waits on
    one table while holding another, and PostgreSQL ends one of them with a deadlock."""
    names = [m.group(1) for s in statements if (m := _CREATED.search(s))]
    row = conn.execute("SELECT count(*) FROM unnest(%s::text[]) AS n WHERE to_regclass(n) IS NULL", (names,)).fetchone()
    return bool(row and row[0])


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]
