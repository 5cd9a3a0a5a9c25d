"""The `eventsourcing` library's appends, timed in its own environment for ``scripts/bench_append.py``.

Why a separate process: the library is a yardstick, never a dependency of the ledger, so it lives in a
virtual environment of its own that ``bench_append.py`` makes; this script runs there and imports
nothing from the ledger. It reads one JSON request per line on stdin and answers one JSON line on
stdout, so the benchmark can interleave its rounds with ours without paying the library's import
time in any figure. The values appended are the ledger's own encoded events (a file of length-prefixed
records written by the benchmark), so both sides store the same bytes.

Requests:
    {"op": "sqlite", "path": FILE, "values": FILE, "batch": N}  -> SQLiteApplicationRecorder.insert_events
        with N StoredEvents per call, into a new file (WAL, as the library sets it)
    {"op": "postgres", "dsn": {...}, "values": FILE, "count": N} -> PostgresApplicationRecorder.insert_events
        with one StoredEvent per call (one transaction each)
"""

from __future__ import annotations

import json
import struct
import sys
import time
import uuid
from typing import Any

from eventsourcing.persistence import StoredEvent
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteDatastore

TOPIC = "caucus.v1:ResultReported"


def load(path: str) -> list[tuple[str, bytes]]:
    """(key, value) pairs from the benchmark's file: u16 key length, key, u32 value length, value."""
    out = []
    with open(path, "rb") as f:
        data = f.read()
    at = 0
    while at < len(data):
        (klen,) = struct.unpack_from(">H", data, at)
        key = data[at + 2 : at + 2 + klen].decode()
        at += 2 + klen
        (vlen,) = struct.unpack_from(">I", data, at)
        out.append((key, data[at + 4 : at + 4 + vlen]))
        at += 4 + vlen
    return out


def stored_events(pairs: list[tuple[str, bytes]]) -> list[StoredEvent]:
    """One aggregate per key (a precinct), versions counted per aggregate: the library's dedupe is the
    unique (originator_id, originator_version), as the ledger's is the unique event id."""
    versions: dict[str, int] = {}
    events = []
    for key, value in pairs:
        version = versions.get(key, 0) + 1
        versions[key] = version
        events.append(StoredEvent(uuid.uuid5(uuid.NAMESPACE_URL, key), version, TOPIC, value))
    return events


def sqlite_batched(req: dict[str, Any]) -> dict[str, Any]:
    events = stored_events(load(req["values"]))
    datastore = SQLiteDatastore(req["path"])
    recorder = SQLiteApplicationRecorder(datastore)
    recorder.create_table()
    batch = int(req["batch"])
    began = time.perf_counter()
    for i in range(0, len(events), batch):
        recorder.insert_events(events[i : i + batch])
    seconds = time.perf_counter() - began
    with datastore.transaction(commit=False) as c:
        c.execute("PRAGMA journal_mode")
        journal = c.fetchone()[0]
        c.execute("PRAGMA synchronous")
        synchronous = c.fetchone()[0]
        c.execute("PRAGMA page_size")
        page_size = c.fetchone()[0]
        c.execute("SELECT COUNT(*) FROM stored_events")
        stored = c.fetchone()[0]
    datastore.close()
    return {"seconds": seconds, "count": stored, "journal_mode": journal, "synchronous": synchronous, "page_size": page_size}


def postgres_single(req: dict[str, Any]) -> dict[str, Any]:
    events = stored_events(load(req["values"]))[: int(req["count"])]
    dsn = req["dsn"]
    datastore = PostgresDatastore(dsn["dbname"], dsn["host"], dsn["port"], dsn["user"], dsn.get("password", ""))
    recorder = PostgresApplicationRecorder(datastore, events_table_name=req.get("table", "stored_events"))
    recorder.create_table()
    began = time.perf_counter()
    for event in events:
        recorder.insert_events([event])
    seconds = time.perf_counter() - began
    stored = len(recorder.select_notifications(start=None, limit=len(events) + 1))
    datastore.close()
    return {"seconds": seconds, "count": stored}


def main() -> int:
    ops = {"sqlite": sqlite_batched, "postgres": postgres_single}
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        req = json.loads(line)
        print(json.dumps(ops[req["op"]](req)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
