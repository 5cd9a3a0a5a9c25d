"""Fixtures for the tamper-evidence tests: a small embedded ledger with signed checkpoints, and two ways
of tampering with a log that refuses UPDATE and DELETE.

How tampering is simulated on the SQLite log (its triggers make the real file append-only):

- ``Tamper.in_place``: copy the database file with SQLite's backup API, drop the two triggers in the
  copy, and UPDATE/DELETE rows there. Offsets keep their numbers, so a deleted row leaves a hole.
- ``Tamper.rebuild``: read every record of a log and append an edited list of them (one changed,
  dropped, swapped, or a different history) to a new, empty log. Offsets are renumbered from 0, as a
  forger who rewrote a whole Kafka topic would produce; this is also how the Kafka test tampers.

Also ``site_at`` (a data directory and a key home driven through the ``caucus`` command, with the
insider's rewrite) and ``serve_witness`` (the real ``caucus witness serve`` in its own process).

Helpers are fixtures (not an importable module) because the suite runs in importlib mode.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from ledger.codec import default_codec
from ledger.events import (
    Channel,
    Event,
    Result,
    ResultReported,
    TieBroken,
    TieMethod,
    UnitOpened,
    new_event,
)
from ledger.integrity.issue import Issued, issue_checkpoint
from ledger.integrity.keys import SigningKey, TrustedKey, generate_key, load_or_create_signing_key
from ledger.integrity.scan import LogScan
from ledger.integrity.store import SqliteCheckpointStore, STORE_FILE
from ledger.integrity.verify import Report, verify_log
from ledger.log.port import EventLog, PendingRecord
from ledger.log.sqlite import SqliteLog

PARTITIONS = 4
CANDIDATES = ("Buttigieg", "Sanders", "Warren", "Biden", "Klobuchar")
_T0 = datetime(2020, 2, 3, 19, 0, tzinfo=UTC)


def make_events(n: int, *, start: int = 0, tag: str = "chair") -> list[Event[Any]]:
    """``n`` plausible events over 13 precincts, deterministic in (start, tag) except for event ids."""
    events: list[Event[Any]] = []
    for i in range(start, start + n):
        unit = f"IA-{i % 13:03d}"
        at = _T0 + timedelta(seconds=i)
        kind = i % 5
        if kind == 0:
            payload: Any = UnitOpened(attendance=100 + i)
        elif kind == 4:
            payload = TieBroken(("Warren", "Biden"), 1, ("Warren",), TieMethod.COIN, caller=f"{tag}-{i}", witnesses=("w1", "w2"))
        else:
            first = {c: (i * (k + 3)) % 40 + 1 for k, c in enumerate(CANDIDATES)}
            final = {c: v + (i % 3) for c, v in first.items() if v > 8}
            payload = ResultReported(Result(first, final or {"Sanders": 1}, attendance=sum(first.values())), reporter=f"{tag}-{i}")
        events.append(new_event(payload, election_id="ia-2020", unit_id=unit, actor=tag, channel=Channel.APP, occurred_at=at, recorded_at=at))
    return events


def append_events(log: EventLog, events: list[Event[Any]]) -> None:
    codec = default_codec()
    log.append_batch([PendingRecord(e.key, e.event_id, codec.encode(e)) for e in events])


@dataclass
class Record:
    """One record of a log, editable before it is appended to a tampered copy."""

    key: str
    event_id: str
    value: bytes


class Ledger:
    """An embedded ledger in a data directory: log, checkpoint store, key pair."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self.key: SigningKey = load_or_create_signing_key(data_dir)[0]

    @property
    def log_path(self) -> Path:
        return self.data_dir / "log.sqlite3"

    def log(self) -> SqliteLog:
        return SqliteLog(self.log_path, partitions=PARTITIONS)

    def store(self) -> SqliteCheckpointStore:
        return SqliteCheckpointStore(self.data_dir / STORE_FILE)

    @property
    def trusted(self) -> list[TrustedKey]:
        return [self.key.trusted]

    def append(self, n: int, *, start: int = 0) -> list[Event[Any]]:
        events = make_events(n, start=start)
        with self.log() as log:
            append_events(log, events)
        return events

    def checkpoint(self) -> Issued:
        store = self.store()
        try:
            with self.log() as log:
                return issue_checkpoint(log, store, self.key, scope="caucus.events")
        finally:
            store.close()

    def verify(self, *, log_path: Path | None = None, store: bool = True, trusted: list[TrustedKey] | None = None) -> tuple[LogScan, Report]:
        st = self.store() if store else None
        try:
            with SqliteLog(log_path or self.log_path) as log:
                return verify_log(log, st, self.trusted if trusted is None else trusted)
        finally:
            if st is not None:
                st.close()

    def copy_to(self, other: Path) -> Ledger:
        """The whole data directory (log, store, keys) copied, for a tampered twin."""
        other.mkdir(parents=True, exist_ok=True)
        for name in ("checkpoint-key.pem", "checkpoint-key.pub"):
            shutil.copy2(self.data_dir / name, other / name)
        for name in (STORE_FILE, "log.sqlite3"):
            _sqlite_copy(self.data_dir / name, other / name)
        return Ledger(other)


def _sqlite_copy(src: Path, dst: Path) -> None:
    """A consistent copy of a live SQLite database (WAL included) via the backup API."""
    s, d = sqlite3.connect(str(src)), sqlite3.connect(str(dst))
    try:
        s.backup(d)
    finally:
        s.close()
        d.close()


class Tamper:
    """See the module docstring."""

    @staticmethod
    def in_place(db: Path, *statements: tuple[str, tuple[Any, ...]]) -> None:
        conn = sqlite3.connect(str(db))
        try:
            conn.execute("DROP TRIGGER IF EXISTS log_records_no_update")
            conn.execute("DROP TRIGGER IF EXISTS log_records_no_delete")
            for sql, args in statements:
                conn.execute(sql, args)
            conn.commit()
        finally:
            conn.close()

    @staticmethod
    def value_at(db: Path, partition: int, offset: int) -> bytes:
        conn = sqlite3.connect(str(db))
        try:
            row = conn.execute('SELECT value FROM log_records WHERE partition=? AND "offset"=?', (partition, offset)).fetchone()
        finally:
            conn.close()
        assert row is not None, f"no record at {partition}:{offset}"
        return bytes(row[0])

    @staticmethod
    def records(log: EventLog) -> dict[int, list[Record]]:
        """Every record, per partition, in offset order."""
        codec = default_codec()
        out: dict[int, list[Record]] = {p: [] for p in range(log.partitions)}
        for rec in log.read():
            out[rec.position.partition].append(Record(rec.key, codec.decode(rec.value).event_id, rec.value))
        return out

    @staticmethod
    def rebuild(src: EventLog, dst: EventLog, edit: Callable[[dict[int, list[Record]]], None]) -> None:
        """Append an edited copy of ``src`` to the empty ``dst`` (``edit`` changes the lists in place)."""
        parts = Tamper.records(src)
        edit(parts)
        dst.append_batch([PendingRecord(r.key, r.event_id, r.value) for p in sorted(parts) for r in parts[p]])


def flip_byte_in_string(value: bytes, text: bytes) -> bytes:
    """Change one byte of ``value``, inside the first occurrence of ``text``: still valid Avro, so only
    the hash can tell."""
    i = value.index(text)
    return value[:i] + bytes([value[i] ^ 0x01]) + value[i + 1 :]


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "data")


@pytest.fixture
def tamper() -> type[Tamper]:
    return Tamper


@pytest.fixture
def other_key() -> SigningKey:
    return generate_key()


@pytest.fixture(scope="session")
def events_factory() -> Callable[..., list[Event[Any]]]:
    return make_events


@pytest.fixture
def flip() -> Callable[[bytes, bytes], bytes]:
    return flip_byte_in_string


@pytest.fixture
def checkpointed(ledger: Ledger) -> Iterator[Ledger]:
    """60 events, a checkpoint, 40 more, a second checkpoint, 10 more (not yet covered)."""
    ledger.append(60)
    ledger.checkpoint()
    ledger.append(40, start=60)
    ledger.checkpoint()
    ledger.append(10, start=100)
    yield ledger


@pytest.fixture(scope="session")
def append() -> Callable[[EventLog, list[Event[Any]]], None]:
    """Append events to any log through the codec."""
    return append_events


CAUCUS = str(Path(sys.executable).parent / "caucus")


class Site:
    """A data directory and a key home outside it, driven through the installed ``caucus`` as an
    operator would; ``rewrite`` is the insider's attack of ``test_insider_rewrite``."""

    def __init__(self, root: Path) -> None:
        root.mkdir(parents=True, exist_ok=True)
        self.root = root
        self.data = root / "data"
        self.keys = root / "keys"
        self.witness = root / "witness"
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")}
        self.env.update(CAUCUS_DATA_DIR=str(self.data), CAUCUS_KEY_HOME=str(self.keys))

    def run(self, *args: str, code: int = 0) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([CAUCUS, *args], cwd=self.root, env=self.env, capture_output=True, text=True, timeout=300)
        assert done.returncode == code, f"caucus {' '.join(args)}: exit {done.returncode}\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        assert "Traceback" not in done.stderr
        return done

    @property
    def public_key(self) -> str:
        return str(self.keys / "checkpoint-key.pub")

    def rewrite(self, *, swap: bool = False, reseal: Path | None = None) -> None:
        """Flip a byte of one recorded event (or ``swap`` it with the next of its partition, seals and
        all), cut every CheckpointSigned record, delete the checkpoint store. An insider who holds a signing key (``reseal``: its PEM) also seals
        every sealed record again with it (``ledger.integrity.writer_seals``), the flipped one included."""
        db = sqlite3.connect(self.data / "log.sqlite3")
        try:
            db.execute("DROP TRIGGER log_records_no_update")
            db.execute("DROP TRIGGER log_records_no_delete")
            seq, value = db.execute("SELECT seq, value FROM log_records ORDER BY seq LIMIT 1 OFFSET 5").fetchone()
            flipped = bytearray(value)
            flipped[-3] ^= 1
            if swap:
                columns = "key, event_id, value, headers"
                mine = db.execute(f"SELECT {columns} FROM log_records WHERE seq = ?", (seq,)).fetchone()
                other, *theirs = db.execute(
                    f"SELECT seq, {columns} FROM log_records WHERE partition = (SELECT partition FROM log_records "
                    "WHERE seq = ?) AND seq > ? ORDER BY seq LIMIT 1", (seq, seq)).fetchone()
                db.execute("UPDATE log_records SET event_id = '' WHERE seq = ?", (seq,))  # ids are unique
                put = "UPDATE log_records SET key = ?, event_id = ?, value = ?, headers = ? WHERE seq = ?"
                db.execute(put, (*mine, other))
                db.execute(put, (*theirs, seq))
            else:
                db.execute("UPDATE log_records SET value = ? WHERE seq = ?", (bytes(flipped), seq))
            cut = db.execute("DELETE FROM log_records WHERE instr(value, CAST('caucus checkpoint' AS BLOB)) > 0").rowcount
            if reseal is not None:
                reseal_rows(db, reseal)
            db.commit()
        finally:
            db.close()
        assert cut >= 1
        (self.data / "checkpoints.sqlite3").unlink()


def reseal_rows(db: sqlite3.Connection, key_pem: Path, where: str = "1") -> int:
    """Seal again, with the key in ``key_pem``, every row of an embedded log (matching ``where``) that
    carries a writer seal: what a holder of a signing key can do to a rewritten record."""
    import json

    from ledger.integrity.keys import load_signing_key
    from ledger.integrity.writer_seals import SEAL, Sealer

    sealer = Sealer(load_signing_key(key_pem))
    rows = db.execute(f"SELECT seq, value, headers FROM log_records WHERE ({where}) AND "
                      f"instr(CAST(headers AS TEXT), '{SEAL}') > 0").fetchall()
    for seq, value, headers in rows:
        kept = json.loads(headers)
        kept[SEAL] = sealer.seal(kept.get("caucus-writer", ""), bytes(value))[1].decode()
        db.execute("UPDATE log_records SET headers = ? WHERE seq = ?", (json.dumps(kept), seq))
    return len(rows)


@pytest.fixture(scope="session")
def reseal() -> Callable[..., int]:
    """``reseal(db, key_pem, where)``: see ``reseal_rows``."""
    return reseal_rows


@pytest.fixture
def site_at() -> Callable[[Path], Site]:
    """``site_at(root)``: a ``Site`` in ``root`` (nothing run yet)."""
    return Site


@dataclass
class ServedWitness:
    """A ``caucus witness serve`` running in its own process."""

    process: subprocess.Popen[bytes]
    port: int
    directory: Path
    log: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        return self.log.read_text(errors="replace")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def serve_witness(tmp_path: Path) -> Iterator[Callable[..., ServedWitness]]:
    """``serve_witness(directory, public_key, ...)``: start the real witness service (uvicorn, in its
    own process) over ``directory``, cosigning checkpoints of the given keys; stopped (SIGTERM) at the end."""
    started: list[ServedWitness] = []

    def start(directory: Path, *public_keys: str) -> ServedWitness:
        port = _free_port()
        keys = [arg for key in public_keys for arg in ("--public-key", key)]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_")}
        log = tmp_path / f"witness-{len(started)}.out"
        with open(log, "wb") as out:
            process = subprocess.Popen([sys.executable, "-c", "from ledger.cli import main; main()", "witness", "serve",
                                        str(directory), *keys, "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT)
        served = ServedWitness(process, port, directory, log)
        started.append(served)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{served.url}/health", timeout=1).status_code == 200:
                    return served
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the witness service did not come up: {served.output()}")
            time.sleep(0.1)

    yield start
    for served in started:
        if served.process.poll() is None:
            served.process.send_signal(signal.SIGTERM)
            try:
                served.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                served.process.kill()
                served.process.wait()
