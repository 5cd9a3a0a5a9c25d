"""The latest record of every key beside a log of changes: what a compacted Kafka topic keeps.

Why: a reader that starts late (a results desk after a restart, a page opened mid-evening) wants the
current record of every key without reading every change since the first. So every record appended
to the change log is put here too, under a key of its own (``put``), and ``snapshot`` gives the
newest record of each key with the change-log position to follow from, so that reading the snapshot
and then following the change log from there misses nothing.

Two adapters, one port (``LatestView``):

* ``CopyLatest``: copies on a second log, for Kafka a topic with ``cleanup.policy=compact`` (the broker
  eventually keeps only the newest record of each key). A broker that never compacts (Tansu, the test
  broker) keeps every copy: the reader keeps the last copy of each key, which is what compaction
  would have left. A copy goes to the partition of the record it copies (``PendingRecord.partition``)
  and carries that record's position (``FEED_POSITION``) and event id (``EVENT_ID``) as headers.
* ``ledger.log.sqlite_latest.SqliteLatest``: a table keyed by the copy's key, upserted (embedded).

Order, and why nothing is missed: records go to the change log first and are put here only once the
change log has them, in the change log's order within each partition. ``follow_from`` is, per change
partition, one past the highest position any kept copy comes from: every change record below it was
put here (its key shows that record or a newer one), unless its put failed, in which case the writer
puts it again later (after appending it to the change log again, at its end: past ``follow_from``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from ledger.log.port import EventLog, Headers, PendingRecord, Position

__all__ = ["FEED_POSITION", "EVENT_ID", "VERSION", "LatestRecord", "LatestSnapshot", "LatestView", "CopyLatest", "follow_from"]

FEED_POSITION = "caucus-feed-position"
"""Header of a copy: the position (``PARTITION:OFFSET``) of the record it copies on the change log."""
EVENT_ID = "caucus-event-id"
"""Header of a copy: the event id of the record it copies (what a writer compares on restart)."""
VERSION = "caucus-version"
"""Header of a copy put with a version: a reader keeps, per key, the copy of the highest version
(the last of equal ones), so an older copy written late never hides a newer one."""


@dataclass(frozen=True, slots=True)
class LatestRecord:
    """The newest record of one key: its value and headers as appended to the change log, where it sits
    there (``position``), and its event id."""

    key: str
    event_id: str
    value: bytes
    position: Position
    timestamp_ms: int = 0
    headers: Headers = ()


@dataclass(frozen=True, slots=True)
class LatestSnapshot:
    """Every key's newest record, and the change-log position (partition -> offset) to follow from."""

    records: dict[str, LatestRecord] = field(default_factory=dict)
    follow_from: dict[int, int] = field(default_factory=dict)


class LatestView(Protocol):
    """The port: ``put`` copies of records the change log holds (at ``positions``) under ``keys``;
    ``snapshot`` reads the newest of each key. With ``versions`` (one per record, growing with each
    newer record of a key) a copy older than the one a key holds never replaces it: the view cannot
    go backwards, whatever order two writers' copies arrive in."""

    def put(self, records: Sequence[PendingRecord], positions: Sequence[Position], keys: Sequence[str],
            versions: Sequence[int] | None = None) -> None: ...

    def snapshot(self) -> LatestSnapshot: ...

    def close(self) -> None: ...


def follow_from(records: dict[str, LatestRecord]) -> dict[int, int]:
    """Per change partition, one past the highest position a kept record comes from."""
    out: dict[int, int] = {}
    for rec in records.values():
        p = rec.position
        out[p.partition] = max(out.get(p.partition, 0), p.offset + 1)
    return out


class CopyLatest:
    """Copies on a second log (module docstring): a compacted Kafka topic, or an in-memory log in tests."""

    def __init__(self, copies: EventLog) -> None:
        self.copies = copies

    def put(self, records: Sequence[PendingRecord], positions: Sequence[Position], keys: Sequence[str],
            versions: Sequence[int] | None = None) -> None:
        marks: Sequence[tuple[tuple[str, bytes], ...]] = (
            [((VERSION, str(v).encode()),) for v in versions] if versions is not None else [()] * len(records))
        self.copies.append_batch([
            PendingRecord(key, rec.event_id, rec.value,
                          (*rec.headers, (FEED_POSITION, str(pos).encode()), (EVENT_ID, rec.event_id.encode()), *mark),
                          partition=pos.partition)
            for rec, pos, key, mark in zip(records, positions, keys, marks, strict=True)
        ])

    def snapshot(self) -> LatestSnapshot:
        """The last copy of each key in the copies' log order (per key one partition, so one order),
        unless an earlier copy carries a higher version (``VERSION``)."""
        kept: dict[str, LatestRecord] = {}
        held: dict[str, int] = {}
        for stored in self.copies.read():
            heads = dict(stored.headers)
            at, event_id, version = heads.get(FEED_POSITION), heads.get(EVENT_ID), heads.get(VERSION)
            if at is None or event_id is None:
                continue  # not a copy this module wrote
            if version is not None:
                try:
                    number = int(version)
                except ValueError:
                    continue  # not a version this module wrote: the copy is not one of ours
                if number < held.get(stored.key, -1):
                    continue  # an older copy written late
                held[stored.key] = number
            theirs = tuple(h for h in stored.headers if h[0] not in (FEED_POSITION, EVENT_ID, VERSION))
            kept[stored.key] = LatestRecord(stored.key, event_id.decode(), stored.value, Position.parse(at.decode()),
                                            stored.timestamp_ms, theirs)
        return LatestSnapshot(kept, follow_from(kept))

    def close(self) -> None:
        self.copies.close()
