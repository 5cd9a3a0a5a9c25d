"""Where signed checkpoints are kept besides the log: one SQLite file, or PostgreSQL.

Why a second copy at all: the log's own ``CheckpointSigned`` events vanish with the log if it is cut
short or rewritten wholesale; a copy held elsewhere does not. With it the store keeps the leaf hashes
each checkpoint covered (32 bytes per record, the same data a transparency log serves as tiles), so
``caucus verify`` can name the exact record that changed instead of only the range between two
checkpoints. The leaf hashes are themselves checked against the signed roots before they are used,
so a store edited along with the log is caught too.

Two tables, the same in both databases: ``signed_checkpoints`` (one row per checkpoint: its canonical
bytes, signature, public key and where its event sits in the log) and ``checkpoint_leaves``
(partition, offset, leaf hash). The names stay clear of the projection runner's offset bookkeeping.
Without a database URL the store is ``checkpoints.sqlite3`` in the data directory (``ledger.backends``
chooses).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ledger.integrity.checkpoints import Checkpoint, CheckpointFormatError, SignedCheckpoint
from ledger.log.port import Position
from ledger.sqlite_setup import ReadOnlyDatabase, create_schema, open_database, use_wal

if TYPE_CHECKING:
    from ledger.config import Settings

__all__ = [
    "STORE_FILE",
    "CheckpointStoreError",
    "StoredRow",
    "CheckpointStore",
    "SqliteCheckpointStore",
    "PostgresCheckpointStore",
    "open_checkpoint_store",
]

STORE_FILE = "checkpoints.sqlite3"

NewLeaves = Mapping[int, tuple[int, Sequence[bytes]]]
"""partition -> (offset of the first hash, leaf hashes from there on)."""


class CheckpointStoreError(RuntimeError):
    """The checkpoint store cannot be opened, read or written (an operational problem)."""


@dataclass(frozen=True, slots=True)
class StoredRow:
    """One stored checkpoint; ``problem`` says why a row could not be read back as one."""

    seq: int
    signed: SignedCheckpoint | None
    problem: str | None = None


class CheckpointStore(Protocol):
    def describe(self) -> str: ...

    def checkpoints(self) -> list[StoredRow]:
        """Every stored checkpoint, in the order recorded."""
        ...

    def leaves(self) -> dict[int, list[bytes]]:
        """partition -> the leaf hashes recorded for offsets 0, 1, 2, ... (contiguous)."""
        ...

    def record(self, signed: SignedCheckpoint, new_leaves: NewLeaves) -> None:
        """Add a checkpoint (its event already appended) and the leaf hashes it newly covers, in one
        transaction. Each partition's new hashes must not start past where its recorded ones end, and
        any that overlap the recorded ones must equal them."""
        ...

    def close(self) -> None: ...


_COLUMNS = 'seq, event_id, partition, "offset", body, public_key, signature'


def _row(seq: int, event_id: str, partition: int | None, offset: int | None, body: bytes, public_key: bytes, signature: bytes) -> StoredRow:
    try:
        checkpoint = Checkpoint.from_bytes(bytes(body))
    except (CheckpointFormatError, UnicodeDecodeError) as exc:
        return StoredRow(seq, None, f"stored checkpoint #{seq} ({event_id}) is not a well-formed checkpoint: {exc}")
    position = None if partition is None or offset is None else Position(partition, offset)
    return StoredRow(seq, SignedCheckpoint(checkpoint, bytes(public_key), bytes(signature), event_id, position))


def _contiguous(rows: Sequence[tuple[int, int, bytes]], where: str) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {}
    for part, off, h in rows:
        hashes = out.setdefault(part, [])
        if off != len(hashes):
            raise CheckpointStoreError(f"{where}: leaf hashes of partition {part} jump from offset {len(hashes)} to {off}")
        hashes.append(bytes(h))
    return out


def unrecorded(part: int, start: int, hashes: Sequence[bytes], have: int, stored: Sequence[bytes]) -> tuple[int, Sequence[bytes]]:
    """The part of ``hashes`` (from offset ``start``) the store does not hold yet, given that it holds
    ``have`` hashes for the partition and ``stored`` are those from ``start`` on. A signer that raced
    another one may bring hashes already recorded; they must be the same ones."""
    if have < start:
        raise CheckpointStoreError(f"partition {part}: the store holds {have} leaf hashes, new ones start at {start}")
    for i, old in enumerate(stored[: len(hashes)]):
        if bytes(old) != hashes[i]:
            raise CheckpointStoreError(
                f"partition {part}: the leaf hash for {part}:{start + i} differs from the one already recorded; "
                "two signers saw different logs"
            )
    return have, hashes[have - start :]


def _row_values(signed: SignedCheckpoint) -> tuple[Any, ...]:
    c = signed.checkpoint
    pos = signed.position
    return (
        signed.event_id, None if pos is None else pos.partition, None if pos is None else pos.offset,
        c.key_id, c.scope, c.timestamp_micros, c.tree_size, c.root_hash, c.to_bytes(), signed.public_key, signed.signature,
    )


_INSERT = (
    'INSERT INTO signed_checkpoints (event_id, partition, "offset", key_id, scope, timestamp_micros, tree_size, '
    "root_hash, body, public_key, signature) VALUES ({marks})"
)


class SqliteCheckpointStore:
    _SCHEMA = """
    CREATE TABLE IF NOT EXISTS signed_checkpoints (
        seq              INTEGER PRIMARY KEY AUTOINCREMENT,
        event_id         TEXT    NOT NULL UNIQUE,
        partition        INTEGER,
        "offset"         INTEGER,
        key_id           TEXT    NOT NULL,
        scope            TEXT    NOT NULL,
        timestamp_micros INTEGER NOT NULL,
        tree_size        INTEGER NOT NULL,
        root_hash        BLOB    NOT NULL,
        body             BLOB    NOT NULL,
        public_key       BLOB    NOT NULL,
        signature        BLOB    NOT NULL
    );
    CREATE TABLE IF NOT EXISTS checkpoint_leaves (
        partition INTEGER NOT NULL,
        "offset"  INTEGER NOT NULL,
        leaf_hash BLOB    NOT NULL,
        PRIMARY KEY (partition, "offset")
    ) WITHOUT ROWID;
    """

    def __init__(self, path: Path, *, read_only: bool = False) -> None:
        """``read_only``: an existing store, opened without creating or changing any file (verify, prove)."""
        self.path = Path(path)
        self._ro: ReadOnlyDatabase | None = None
        try:
            self._conn, self._ro = open_database(self.path, 30.0, read_only=read_only)
            if read_only:
                return
            use_wal(self._conn, 30.0)
            create_schema(self._conn, self._SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise CheckpointStoreError(f"cannot open the checkpoint store {self.path}: {exc}") from exc

    def describe(self) -> str:
        return f"sqlite:{self.path}"

    def checkpoints(self) -> list[StoredRow]:
        try:
            rows = self._conn.execute(f"SELECT {_COLUMNS} FROM signed_checkpoints ORDER BY seq").fetchall()
        except sqlite3.Error as exc:
            raise CheckpointStoreError(f"cannot read checkpoints from {self.path}: {exc}") from exc
        return [_row(*r) for r in rows]

    def leaves(self) -> dict[int, list[bytes]]:
        try:
            rows = self._conn.execute('SELECT partition, "offset", leaf_hash FROM checkpoint_leaves ORDER BY partition, "offset"').fetchall()
        except sqlite3.Error as exc:
            raise CheckpointStoreError(f"cannot read leaf hashes from {self.path}: {exc}") from exc
        return _contiguous(rows, self.describe())

    def record(self, signed: SignedCheckpoint, new_leaves: NewLeaves) -> None:
        conn = self._conn
        try:
            conn.execute("BEGIN IMMEDIATE")
            try:
                for part, (start, hashes) in new_leaves.items():
                    have = conn.execute("SELECT COUNT(*) FROM checkpoint_leaves WHERE partition = ?", (part,)).fetchone()[0]
                    stored = [r[0] for r in conn.execute(
                        'SELECT leaf_hash FROM checkpoint_leaves WHERE partition = ? AND "offset" >= ? ORDER BY "offset"', (part, start)
                    )]
                    start, hashes = unrecorded(part, start, hashes, have, stored)
                    conn.executemany(
                        'INSERT INTO checkpoint_leaves (partition, "offset", leaf_hash) VALUES (?, ?, ?)',
                        ((part, start + i, h) for i, h in enumerate(hashes)),
                    )
                conn.execute(_INSERT.format(marks=", ".join("?" * 11)), _row_values(signed))
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.Error as exc:
            raise CheckpointStoreError(f"cannot record the checkpoint in {self.path}: {exc}") from exc

    def close(self) -> None:
        if self._ro is not None:
            self._ro.close()
        else:
            self._conn.close()


class PostgresCheckpointStore:
    _SCHEMA = """
    CREATE TABLE IF NOT EXISTS signed_checkpoints (
        seq              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        event_id         TEXT   NOT NULL UNIQUE,
        partition        INTEGER,
        "offset"         BIGINT,
        key_id           TEXT   NOT NULL,
        scope            TEXT   NOT NULL,
        timestamp_micros BIGINT NOT NULL,
        tree_size        BIGINT NOT NULL,
        root_hash        BYTEA  NOT NULL,
        body             BYTEA  NOT NULL,
        public_key       BYTEA  NOT NULL,
        signature        BYTEA  NOT NULL
    );
    CREATE TABLE IF NOT EXISTS checkpoint_leaves (
        partition INTEGER NOT NULL,
        "offset"  BIGINT  NOT NULL,
        leaf_hash BYTEA   NOT NULL,
        PRIMARY KEY (partition, "offset")
    );
    """

    def __init__(self, dsn: str) -> None:
        import psycopg

        self._psycopg = psycopg
        self._dsn = dsn
        try:
            self._conn = psycopg.connect(dsn)
            with self._conn.transaction():
                # Two first checkpoints at once must not race on CREATE TABLE.
                self._conn.execute("SELECT pg_advisory_xact_lock(hashtext('caucus.signed_checkpoints'))")
                self._conn.execute(self._SCHEMA)
        except psycopg.Error as exc:
            raise CheckpointStoreError(f"cannot open the checkpoint store in PostgreSQL: {exc}") from exc

    def describe(self) -> str:
        info = self._conn.info
        return f"postgresql://{info.host}:{info.port}/{info.dbname}"

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        try:
            yield
        except self._psycopg.Error as exc:
            raise CheckpointStoreError(f"cannot {doing} in PostgreSQL: {exc}") from exc

    def checkpoints(self) -> list[StoredRow]:
        with self._errors("read checkpoints"), self._conn.transaction():
            rows = self._conn.execute(f"SELECT {_COLUMNS} FROM signed_checkpoints ORDER BY seq").fetchall()
        return [_row(*r) for r in rows]

    def leaves(self) -> dict[int, list[bytes]]:
        with self._errors("read leaf hashes"), self._conn.transaction():
            rows = self._conn.execute('SELECT partition, "offset", leaf_hash FROM checkpoint_leaves ORDER BY partition, "offset"').fetchall()
        return _contiguous(rows, self.describe())

    def record(self, signed: SignedCheckpoint, new_leaves: NewLeaves) -> None:
        with self._errors("record the checkpoint"), self._conn.transaction():
            conn = self._conn
            conn.execute("SELECT pg_advisory_xact_lock(hashtext('caucus.signed_checkpoints'))")
            for part, (start, hashes) in new_leaves.items():
                row = conn.execute("SELECT COUNT(*) FROM checkpoint_leaves WHERE partition = %s", (part,)).fetchone()
                have = row[0] if row else 0
                stored = [r[0] for r in conn.execute(
                    'SELECT leaf_hash FROM checkpoint_leaves WHERE partition = %s AND "offset" >= %s ORDER BY "offset"', (part, start)
                )]
                start, hashes = unrecorded(part, start, hashes, have, stored)
                with conn.cursor() as cur, cur.copy('COPY checkpoint_leaves (partition, "offset", leaf_hash) FROM STDIN') as copy:
                    for i, h in enumerate(hashes):
                        copy.write_row((part, start + i, h))
            conn.execute(_INSERT.format(marks=", ".join(["%s"] * 11)), _row_values(signed))

    def close(self) -> None:
        self._conn.close()


def open_checkpoint_store(settings: Settings, *, create: bool) -> CheckpointStore | None:
    """The store ``ledger.backends`` chooses: PostgreSQL when a database URL is configured, else the
    data directory's SQLite file. With ``create`` false a store that does not exist is None:
    verifying must not create files."""
    from ledger.backends import backends_for

    return backends_for(settings).open_checkpoint_store(create=create)
