"""The embedded log: one SQLite file, append-only by construction.

It exists so the ledger runs with nothing installed, and it must behave like the Kafka topic it stands
in for: the same key-to-partition mapping, offsets counted per partition, a dedupe on event id. The
schema refuses UPDATE and DELETE with triggers, so not even a careless SQL session can rewrite history.
WAL mode lets many reader processes follow while one writer appends; writers in other processes wait
on SQLite's lock (``BEGIN IMMEDIATE`` with a busy timeout) rather than fail.

A file that cannot be opened, read or written (disk full, read-only, an I/O error, a file that is not
a database) is ``LogUnavailableError``, as an unreachable broker is for the Kafka adapter: callers spool
and retry instead of failing. An append either commits whole or leaves nothing (SQLite's transaction).
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ledger.log.partitioning import partition_for
from ledger.log.port import (
    LogError,
    LogLostError,
    LogUnavailableError,
    Offsets,
    PendingRecord,
    Position,
    StoredRecord,
)
from ledger.sqlite_setup import create_schema, use_wal

__all__ = ["SqliteLog", "DEFAULT_PARTITIONS"]

DEFAULT_PARTITIONS = 8
_CHUNK = 2000
_VERBS = {"open": "opened", "read": "read", "write": "written"}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS log_meta (
    name  TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS log_records (
    seq          INTEGER PRIMARY KEY,            -- global append order (rowid)
    partition    INTEGER NOT NULL,
    "offset"     INTEGER NOT NULL,
    key          TEXT    NOT NULL,
    event_id     TEXT    NOT NULL UNIQUE,
    value        BLOB    NOT NULL,
    timestamp_ms INTEGER NOT NULL,
    UNIQUE (partition, "offset")
);
CREATE TRIGGER IF NOT EXISTS log_records_no_update BEFORE UPDATE ON log_records
BEGIN SELECT RAISE(ABORT, 'the log is append-only: records cannot be updated'); END;
CREATE TRIGGER IF NOT EXISTS log_records_no_delete BEFORE DELETE ON log_records
BEGIN SELECT RAISE(ABORT, 'the log is append-only: records cannot be deleted'); END;
CREATE TRIGGER IF NOT EXISTS log_meta_no_update BEFORE UPDATE ON log_meta
BEGIN SELECT RAISE(ABORT, 'log settings are fixed when the log is created'); END;
"""


class SqliteLog:
    """An EventLog in a single SQLite file (see module docstring)."""

    def __init__(self, path: str | Path, *, partitions: int | None = None, timeout: float = 30.0) -> None:
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._conn = sqlite3.connect(str(self.path), timeout=timeout, isolation_level=None, check_same_thread=False)
        except (OSError, sqlite3.Error) as exc:
            raise LogUnavailableError(f"cannot open the embedded log at {self.path}: {exc}") from exc
        self._lock = threading.RLock()
        try:
            with self._io("open"):
                use_wal(self._conn, timeout)
                self._conn.execute("PRAGMA synchronous=FULL")
                create_schema(self._conn, _SCHEMA)
                self._partitions = self._settle_partitions(partitions)
        except BaseException:
            self._conn.close()
            raise

    @contextmanager
    def _io(self, what: str) -> Iterator[None]:
        """Turn SQLite's file errors into the port's LogUnavailableError (see module docstring)."""
        try:
            yield
        except (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError):
            raise  # a bug or a broken invariant, not the file
        except sqlite3.Error as exc:
            raise LogUnavailableError(f"the embedded log at {self.path} cannot be {_VERBS[what]}: {exc}") from exc

    def _rollback(self) -> None:
        """Undo an open transaction; after an I/O error SQLite may have rolled back already."""
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # the connection is unusable; the next statement says so

    def _settle_partitions(self, wanted: int | None) -> int:
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                row = self._conn.execute("SELECT value FROM log_meta WHERE name='partitions'").fetchone()
                if row is None:
                    count = wanted or DEFAULT_PARTITIONS
                    if count < 1:
                        raise LogError(f"partitions must be at least 1, got {count}")
                    self._conn.execute("INSERT INTO log_meta VALUES ('partitions', ?)", (str(count),))
                else:
                    count = int(row[0])
                    if wanted is not None and wanted != count:
                        raise LogError(f"the log at {self.path} has {count} partitions, not {wanted}; a log's partition count is fixed")
                self._conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        return count

    @property
    def partitions(self) -> int:
        return self._partitions

    def append(self, record: PendingRecord) -> Position:
        return self.append_batch([record])[0]

    def append_batch(self, records: Sequence[PendingRecord]) -> list[Position]:
        if not records:
            return []
        now_ms = int(time.time() * 1000)
        with self._lock, self._io("write"):
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")  # waits up to the timeout for another writer's lock
            try:
                known = self._existing(conn, [r.event_id for r in records])
                heads: dict[int, int] = {}
                rows = []
                positions: list[Position] = []
                for rec in records:
                    if rec.event_id in known:
                        positions.append(known[rec.event_id])
                        continue
                    part = partition_for(rec.key, self._partitions)
                    if part not in heads:
                        heads[part] = conn.execute(
                            'SELECT COALESCE(MAX("offset") + 1, 0) FROM log_records WHERE partition = ?', (part,)
                        ).fetchone()[0]
                    pos = Position(part, heads[part])
                    heads[part] += 1
                    known[rec.event_id] = pos
                    positions.append(pos)
                    rows.append((part, pos.offset, rec.key, rec.event_id, rec.value, now_ms))
                conn.executemany(
                    'INSERT INTO log_records (partition, "offset", key, event_id, value, timestamp_ms) VALUES (?, ?, ?, ?, ?, ?)',
                    rows,
                )
                conn.execute("COMMIT")
            except BaseException:
                self._rollback()
                raise
        return positions

    @staticmethod
    def _existing(conn: sqlite3.Connection, event_ids: list[str]) -> dict[str, Position]:
        found: dict[str, Position] = {}
        unique = list(dict.fromkeys(event_ids))
        for i in range(0, len(unique), 500):
            chunk = unique[i : i + 500]
            marks = ",".join("?" * len(chunk))
            for eid, part, off in conn.execute(
                f'SELECT event_id, partition, "offset" FROM log_records WHERE event_id IN ({marks})', chunk
            ):
                found[eid] = Position(part, off)
        return found

    def high_watermarks(self) -> dict[int, int]:
        # One index seek per partition: a GROUP BY over the table scans every record, and a runner
        # on the embedded log asks for this on every poll.
        out: dict[int, int] = {}
        with self._lock, self._io("read"):
            for part in range(self._partitions):
                row = self._conn.execute('SELECT MAX("offset") FROM log_records WHERE partition = ?', (part,)).fetchone()
                out[part] = 0 if row[0] is None else row[0] + 1
        return out

    def _check_start(self, start: Offsets, marks: dict[int, int]) -> None:
        for part, offset in start.items():
            if part not in marks:
                raise LogError(f"partition {part} does not exist; the log has {self._partitions}")
            if offset > marks[part]:
                raise LogLostError(part, offset, marks[part])

    def read(self, start: Offsets | None = None, *, max_records: int | None = None) -> Iterator[StoredRecord]:
        begin = dict(start or {})
        with self._lock, self._io("read"):
            marks = self.high_watermarks()
            self._check_start(begin, marks)
            top = self._conn.execute("SELECT COALESCE(MAX(seq), 0) FROM log_records").fetchone()[0]
            first_seq = self._first_seq(begin)
        yield from self._scan(begin, first_seq, top, max_records)

    def _first_seq(self, begin: dict[int, int]) -> int:
        """The lowest global sequence at or after every partition's start: where a scan must begin."""
        lowest: int | None = None
        for part in range(self._partitions):
            # Within a partition seq grows with offset (both count appends), so the first record at
            # or after the start has the lowest seq: one index seek, not a scan of the partition.
            row = self._conn.execute(
                'SELECT seq FROM log_records WHERE partition = ? AND "offset" >= ? ORDER BY "offset" LIMIT 1',
                (part, begin.get(part, 0)),
            ).fetchone()
            if row is not None and (lowest is None or row[0] < lowest):
                lowest = row[0]
        return lowest if lowest is not None else 1 << 62

    def _scan(self, begin: dict[int, int], first_seq: int, top: int, max_records: int | None) -> Iterator[StoredRecord]:
        emitted = 0
        cursor_seq = first_seq - 1
        while cursor_seq < top:
            with self._lock, self._io("read"):
                rows = self._conn.execute(
                    'SELECT seq, partition, "offset", key, value, timestamp_ms FROM log_records '
                    "WHERE seq > ? AND seq <= ? ORDER BY seq LIMIT ?",
                    (cursor_seq, top, _CHUNK),
                ).fetchall()
            if not rows:
                return
            for seq, part, off, key, value, ts in rows:
                cursor_seq = seq
                if off < begin.get(part, 0):
                    continue
                yield StoredRecord(Position(part, off), key, value, ts)
                emitted += 1
                if max_records is not None and emitted >= max_records:
                    return

    def follow(
        self,
        start: Offsets | None = None,
        *,
        stop: Callable[[], bool] | None = None,
        poll_interval: float = 0.2,
    ) -> Iterator[StoredRecord]:
        position = {p: 0 for p in range(self._partitions)}
        position.update(start or {})
        while True:
            got = False
            for rec in self.read(position):
                position[rec.position.partition] = rec.position.offset + 1
                got = True
                yield rec
                if stop is not None and stop():
                    return
            if stop is not None and stop():
                return
            if not got:
                time.sleep(poll_interval)

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def __enter__(self) -> SqliteLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
