"""Batched append, the ledger's logs beside the `eventsourcing` library's recorders, in one run.

Why: the embedded log must append at least as fast as a well-known event store on the same SQLite, and
the Kafka log must stay well ahead of that library's PostgreSQL append of one event per transaction
(the way an application using it records each command). Figures measured on different days on a
shared machine cannot be compared, so both sides run here, rounds interleaved (ours, theirs, ours, ...),
and each figure is given as min / median / max with the ratio of medians and of each round's pair.

The library is a yardstick, not a dependency: it is installed in a virtual environment of its own
(``--peer-venv``, by default under the user's cache directory, made on first use with pip) and timed
there by ``scripts/eventsourcing_peer.py``, which is fed the ledger's own encoded events.

Compared, with the same events (ResultReported of ``--units`` precincts, ~200 B encoded):
  * SQLite: ``SqliteLog.append_batch`` (records already encoded) against
    ``SQLiteApplicationRecorder.insert_events`` with the same number of ``StoredEvent`` per call; both
    files in WAL mode with ``synchronous=FULL`` (printed as each side reports it), each round a new file.
    The events carry ids ordered by time, as the intake gives them; a second row appends the same events
    under random ids (as the importer's uuid5 are), to show what the order is worth.
  * Kafka vs PostgreSQL: ``KafkaLog.append_batch`` (``--kafka-batch`` per call) against
    ``PostgresApplicationRecorder.insert_events`` with one event per call on the local PostgreSQL
    (``--pg-events`` of them: at about a thousand a second a full run would take minutes).

    python scripts/bench_append.py --events 20000 --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sqlite3
import statistics
import struct
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from psycopg.conninfo import conninfo_to_dict

from bench_log import kafka_bootstrap, make_events
from infra.postgres import ensure_running, temporary_database
from ledger.codec import default_codec
from ledger.log.kafka import KafkaLog
from ledger.log.port import PendingRecord
from ledger.log.partitioning import partition_for
from ledger.log.sqlite import _INSERT, _SCHEMA, SqliteLog, _headers_blob
from ledger.record_headers import event_headers

WRITER = "import:bench"
PEER = Path(__file__).with_name("eventsourcing_peer.py")
DEFAULT_VENV = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "caucus-ledger" / "bench-eventsourcing"


def peer_python(venv: Path, spec: str) -> Path:
    """The peer environment's interpreter, made (venv + pip install) the first time."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import eventsourcing.postgres, eventsourcing.sqlite"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return python
    print(f"making the eventsourcing environment in {venv} (pip install {spec!r}) ...", flush=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run([str(python), "-m", "pip", "install", "-q", spec], check=True)
    return python


class Peer:
    """The peer process: one request, one answer, both JSON lines."""

    def __init__(self, python: Path) -> None:
        self.proc = subprocess.Popen([str(python), str(PEER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.ask_raw(None)

    def ask_raw(self, request: dict[str, Any] | None) -> dict[str, Any]:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        if request is not None:
            self.proc.stdin.write(json.dumps(request) + "\n")
            self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"the eventsourcing peer stopped (exit {self.proc.wait()})")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        self.proc.wait(timeout=30)


def write_values(records: list[PendingRecord], path: Path) -> None:
    with path.open("wb") as f:
        for rec in records:
            key = rec.key.encode()
            f.write(struct.pack(">H", len(key)) + key + struct.pack(">I", len(rec.value)) + rec.value)


def timed_appends(log: Any, records: list[PendingRecord], batch: int) -> float:
    """Seconds to append ``records`` in calls of ``batch``; checks every record got a position."""
    began = time.perf_counter()
    got = 0
    for i in range(0, len(records), batch):
        got += len(log.append_batch(records[i : i + batch]))
    seconds = time.perf_counter() - began
    if got != len(records) or sum(log.high_watermarks().values()) != len(records):
        raise SystemExit(f"{type(log).__name__}: appended {len(records)}, but the log holds {sum(log.high_watermarks().values())}")
    return seconds


def sqlite_synchronous(path: Path) -> str:
    """What the ledger's file is set to, read on the writer's own connection."""
    with SqliteLog(path) as log:
        journal = log._conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = log._conn.execute("PRAGMA synchronous").fetchone()[0]
        pages = log._conn.execute("PRAGMA page_size").fetchone()[0]
    return f"journal_mode={journal}, synchronous={sync}, page_size={pages}"


# The library's table, as its SQLiteApplicationRecorder creates it (eventsourcing 9.5), for the
# statements-only row: the same INSERTs both sides run, without either side's Python around them.
ES_TABLE = ("CREATE TABLE stored_events (originator_id TEXT, originator_version INTEGER, topic TEXT, state BLOB, "
            "PRIMARY KEY (originator_id, originator_version))")
ES_INSERT = "INSERT INTO stored_events VALUES (?, ?, ?, ?)"


def statements_only(path: Path, schema: str, insert: str, rows: list[tuple[Any, ...]], batch: int) -> float:
    """Seconds for BEGIN IMMEDIATE / executemany / COMMIT of ``rows`` on a new WAL file, synchronous=FULL:
    the floor each schema sets, whatever code drives it."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(schema)
    began = time.perf_counter()
    for i in range(0, len(rows), batch):
        conn.execute("BEGIN IMMEDIATE")
        conn.executemany(insert, rows[i : i + batch])
        conn.execute("COMMIT")
    seconds = time.perf_counter() - began
    conn.close()
    return seconds


def statement_rows(records: list[PendingRecord], partitions: int) -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The rows each side's INSERT takes for the same records (ours as ``SqliteLog`` builds them)."""
    heads: dict[int, int] = {}
    versions: dict[str, int] = {}
    ours, theirs = [], []
    for rec in records:
        part = partition_for(rec.key, partitions)
        heads[part] = heads.get(part, -1) + 1
        versions[rec.key] = versions.get(rec.key, 0) + 1
        ours.append((part, heads[part], rec.key, rec.event_id, rec.value, 0, _headers_blob(rec.headers)))
        theirs.append((uuid.uuid5(uuid.NAMESPACE_URL, rec.key).hex, versions[rec.key], "caucus.v1:ResultReported", rec.value))
    return ours, theirs


@contextmanager
def pg_database() -> Iterator[dict[str, str]]:
    server = ensure_running()
    with temporary_database("bench_append", server) as dsn:
        parts = conninfo_to_dict(dsn)
        yield {k: str(parts.get(k, "")) for k in ("dbname", "host", "port", "user", "password")}


def spread(values: list[float]) -> str:
    return f"{min(values):>9,.0f} {statistics.median(values):>9,.0f} {max(values):>9,.0f}"


def report(name: str, ours: list[float], theirs: list[float], target: float | None) -> None:
    pairs = sorted(o / t for o, t in zip(ours, theirs))
    ratio = statistics.median(ours) / statistics.median(theirs)
    verdict = "" if target is None else f"; target >= {target:g}x: {'met' if ratio >= target else 'NOT met'}"
    print(f"{name:<34} {spread(ours)} | {spread(theirs)} | {ratio:>6.2f}x (rounds {pairs[0]:.2f}..{pairs[-1]:.2f}{verdict})")


def run_rounds(args: argparse.Namespace, peer: Peer, records: list[PendingRecord], random_ids: list[PendingRecord],
               values: Path, tmp: Path, bootstrap: str, pg: dict[str, str]) -> dict[str, tuple[list[float], list[float]]]:
    results: dict[str, tuple[list[float], list[float]]] = {}

    def add(name: str, ours_rate: float, theirs_rate: float) -> None:
        results.setdefault(name, ([], []))[0].append(ours_rate)
        results[name][1].append(theirs_rate)

    n, pg_n = len(records), min(args.pg_events, len(records))
    our_rows, their_rows = statement_rows(records, args.partitions)
    for round_ in range(1, args.rounds + 1):
        for batch in args.batches:
            print(f"round {round_}/{args.rounds}: sqlite, batches of {batch} ...", flush=True)
            with SqliteLog(tmp / f"ours-{uuid.uuid4().hex[:8]}.sqlite3", partitions=args.partitions) as log:
                ours = n / timed_appends(log, records, batch)
            got = peer.ask_raw({"op": "sqlite", "path": str(tmp / f"es-{uuid.uuid4().hex[:8]}.sqlite3"),
                                "values": str(values), "batch": batch})
            if got["count"] != n:
                raise SystemExit(f"eventsourcing stored {got['count']} of {n} events")
            args.es_sqlite = f"journal_mode={got['journal_mode']}, synchronous={got['synchronous']}, page_size={got.get('page_size')}"
            add(f"SQLite, batches of {batch}", ours, n / got["seconds"])
            with SqliteLog(tmp / f"ours-{uuid.uuid4().hex[:8]}.sqlite3", partitions=args.partitions) as log:
                add(f"  random event ids, {batch}", n / timed_appends(log, random_ids, batch), n / got["seconds"])
            ours = n / statements_only(tmp / f"raw-{uuid.uuid4().hex[:8]}.sqlite3", _SCHEMA, _INSERT, our_rows, batch)
            theirs = n / statements_only(tmp / f"raw-{uuid.uuid4().hex[:8]}.sqlite3", ES_TABLE, ES_INSERT, their_rows, batch)
            add(f"  statements only, {batch}", ours, theirs)
        print(f"round {round_}/{args.rounds}: kafka batches of {args.kafka_batch}; postgres one by one ...", flush=True)
        with KafkaLog(bootstrap, f"bench-{uuid.uuid4().hex[:8]}", partitions=args.partitions, timeout=30) as klog:
            ours = n / timed_appends(klog, records, args.kafka_batch)
        got = peer.ask_raw({"op": "postgres", "dsn": pg, "values": str(values), "count": pg_n,
                            "table": f"events_{uuid.uuid4().hex[:8]}"})
        if got["count"] != pg_n:
            raise SystemExit(f"eventsourcing stored {got['count']} of {pg_n} events in PostgreSQL")
        add(f"Kafka batches of {args.kafka_batch} / PG single", ours, pg_n / got["seconds"])
    return results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", "-n", type=int, default=20_000)
    parser.add_argument("--batches", type=lambda s: [int(x) for x in s.split(",")], default=[100, 1000],
                        help="SQLite batch sizes, comma-separated (default 100,1000)")
    parser.add_argument("--kafka-batch", type=int, default=1000)
    parser.add_argument("--pg-events", type=int, default=2000, help="events the PostgreSQL peer appends one by one")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--units", type=int, default=1700)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--kafka", help="bootstrap of a running broker (default: start a local Tansu)")
    parser.add_argument("--peer-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--peer-spec", default="eventsourcing[postgres]>=9.4")
    parser.add_argument("--seed", type=int, default=2020)
    args = parser.parse_args(argv)
    if args.rounds < 3:
        parser.error("--rounds must be at least 3 (min / median / max)")

    python = peer_python(args.peer_venv, args.peer_spec)
    version = subprocess.run([str(python), "-c", "import importlib.metadata as m; print(m.version('eventsourcing'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    print(f"building {args.events} ResultReported events over {args.units} precincts ...", flush=True)
    encode = default_codec().encode
    records = []
    for ev in make_events(args.events, args.units, args.seed):  # with the headers the ledger's journal gives
        value = encode(ev)
        records.append(PendingRecord(ev.key, ev.event_id, value, event_headers(ev, value, WRITER)))
    # The same events under random ids (the importer's uuid5 are): what ordered ids are worth
    rng = random.Random(args.seed)
    random_ids = [replace(r, event_id=str(uuid.UUID(int=rng.getrandbits(128)))) for r in records]
    with ExitStack() as stack:
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-append-")))
        values = tmp / "values.bin"
        write_values(records, values)
        peer = Peer(python)
        stack.callback(peer.close)
        bootstrap, where = stack.enter_context(kafka_bootstrap(args.kafka, tmp / "run"))
        pg = stack.enter_context(pg_database())
        results = run_rounds(args, peer, records, random_ids, values, tmp, bootstrap, pg)
        ours_sqlite = sqlite_synchronous(tmp / "settings.sqlite3")

    print()
    print(f"{args.events} events ({sum(len(r.value) for r in records) / len(records):.0f} B mean), {args.units} keys, "
          f"{args.partitions} partitions, {args.rounds} interleaved rounds; eventsourcing {version}; kafka: {where}")
    print(f"SQLite settings: ours {ours_sqlite}; eventsourcing {args.es_sqlite}")
    print("event ids ordered by time (UUIDv7, as the intake gives them); 'random event ids': the same events under "
          "random ids (as the importer's uuid5), against the same eventsourcing figures")
    print("'statements only': the same INSERTs in both schemas from this process, no adapter code on either side")
    print(f"PostgreSQL peer: {min(args.pg_events, args.events)} events, one insert_events call (transaction) each")
    print(f"{'events/s':<34} {'ours min':>9} {'median':>9} {'max':>9} | {'es min':>9} {'median':>9} {'max':>9} | ratio of medians")
    for name, (ours, theirs) in results.items():
        report(name, ours, theirs, None if name.startswith(" ") else 20.0 if name.startswith("Kafka") else 1.0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
