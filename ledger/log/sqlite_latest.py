"""The embedded latest view (``ledger.log.latest``): one row per key, replaced by each newer record.

Why a table and not a second log: SQLite has no compaction, and the point of the view is a read whose
cost follows the number of keys, not the number of changes. It lives in the change log's own file (a
table the log does not know), so the feed stays one file to copy or hand over. Each ``put`` is one
transaction, after the change log's append has committed (module docstring of ``ledger.log.latest``:
that order is what lets a reader follow the change log from the snapshot without a gap).

Readers open it read-only: a file or a table that is not there is an empty view, and nothing is created.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Sequence
from pathlib import Path

import orjson

from ledger.log.latest import LatestRecord, LatestSnapshot, follow_from
from ledger.log.port import Headers, LogUnavailableError, PendingRecord, Position
from ledger.sqlite_setup import MissingDatabase, ReadOnlyDatabase, create_schema, open_database, use_wal

__all__ = ["SqliteLatest"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS latest_records (
    key          TEXT    PRIMARY KEY,
    event_id     TEXT    NOT NULL,
    partition    INTEGER NOT NULL,       -- where the record sits on the change log
    "offset"     INTEGER NOT NULL,
    value        BLOB    NOT NULL,
    timestamp_ms INTEGER NOT NULL,
    headers      BLOB,                   -- JSON object (name -> text)
    version      INTEGER                 -- when put with one: an older record never replaces it
);
"""
_UPSERT = (
    'INSERT INTO latest_records (key, event_id, partition, "offset", value, timestamp_ms, headers, version) '
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (key) DO UPDATE SET event_id = excluded.event_id, "
    'partition = excluded.partition, "offset" = excluded."offset", value = excluded.value, '
    "timestamp_ms = excluded.timestamp_ms, headers = excluded.headers, version = excluded.version "
    "WHERE excluded.version IS NULL OR latest_records.version IS NULL OR excluded.version >= latest_records.version"
)
"""One row per key, replaced by a record of the same or a higher version (``LatestView``), never by an
older one, so two writers' puts in either order leave the newest."""


class SqliteLatest:
    """A ``LatestView`` in the table ``latest_records`` of ``path`` (module docstring)."""

    def __init__(self, path: str | Path, *, read_only: bool = False, timeout: float = 30.0) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        self._ro: ReadOnlyDatabase | None = None
        try:
            if read_only and not self.path.is_file():
                return
            self._conn, self._ro = open_database(self.path, timeout, read_only=read_only)
            if not read_only:
                use_wal(self._conn, timeout)
                create_schema(self._conn, _SCHEMA)
                _add_version(self._conn)
        except MissingDatabase:
            return
        except (OSError, sqlite3.Error) as exc:
            self.close()
            raise LogUnavailableError(f"cannot open the latest records in {self.path}: {exc}") from exc

    def put(self, records: Sequence[PendingRecord], positions: Sequence[Position], keys: Sequence[str],
            versions: Sequence[int] | None = None) -> None:
        if self._conn is None or self._ro is not None:
            raise LogUnavailableError(f"the latest records in {self.path} were opened read-only")
        now_ms = int(time.time() * 1000)
        marks: Sequence[int | None] = versions if versions is not None else [None] * len(records)
        rows = [(key, rec.event_id, pos.partition, pos.offset, rec.value, now_ms, _blob(rec.headers), version)
                for rec, pos, key, version in zip(records, positions, keys, marks, strict=True)]
        with self._lock:
            conn = self._conn
            try:
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(_UPSERT, rows)
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise LogUnavailableError(f"the latest records in {self.path} cannot be written: {exc}") from exc

    def snapshot(self) -> LatestSnapshot:
        if self._conn is None:
            return LatestSnapshot()
        with self._lock:
            try:
                rows = self._conn.execute(
                    'SELECT key, event_id, partition, "offset", value, timestamp_ms, headers FROM latest_records'
                ).fetchall()
            except sqlite3.OperationalError as exc:
                if "no such table" in str(exc):
                    return LatestSnapshot()  # a feed written before the view existed
                raise LogUnavailableError(f"the latest records in {self.path} cannot be read: {exc}") from exc
            except sqlite3.Error as exc:
                raise LogUnavailableError(f"the latest records in {self.path} cannot be read: {exc}") from exc
        kept = {key: LatestRecord(key, eid, value, Position(part, off), ts, _headers(head))
                for key, eid, part, off, value, ts, head in rows}
        return LatestSnapshot(kept, follow_from(kept))

    def close(self) -> None:
        with self._lock:
            if self._ro is not None:
                self._ro.close()
            elif self._conn is not None:
                self._conn.close()
            self._conn = self._ro = None


def _add_version(conn: sqlite3.Connection) -> None:
    """A view written before records had versions gets the column (its rows stay without one, and
    any record replaces them): ``CREATE TABLE IF NOT EXISTS`` leaves an existing table as it was."""
    if not any(row[1] == "version" for row in conn.execute("PRAGMA table_info(latest_records)")):
        try:
            conn.execute("ALTER TABLE latest_records ADD COLUMN version INTEGER")
        except sqlite3.OperationalError as exc:
            if "duplicate column" not in str(exc):  # another process added it meanwhile
                raise


def _blob(headers: Headers) -> bytes | None:
    return orjson.dumps({name: value.decode("utf-8", errors="replace") for name, value in headers}) if headers else None


def _headers(blob: bytes | None) -> Headers:
    return tuple((name, str(value).encode()) for name, value in orjson.loads(blob).items()) if blob else ()
