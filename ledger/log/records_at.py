"""The record at given positions of a log, read with as little of the rest as the log allows.

A reader that must know what a log holds at a few positions (the record a projection applied last in
each partition, the event a spooled command was judged after) reads from just there: through the
``EventLog`` port every partition is read, so the others are started at their ends, or at what the
caller has already read of them.
"""

from __future__ import annotations

from collections.abc import Mapping

from ledger.log.port import EventLog, StoredRecord

__all__ = ["records_at"]


def records_at(log: EventLog, offsets: Mapping[int, int], marks: Mapping[int, int] | None = None, *,
               rest: Mapping[int, int] | None = None, scan: int = 10_000) -> dict[int, StoredRecord | None]:
    """The record at each ``partition: offset`` (None where the log holds none there: a gap a Kafka
    transaction marker leaves). With ``marks`` (high watermarks known at no cost: an embedded log's),
    each partition is read on its own, the others pinned at their ends: an index seek each. Without,
    one read from all of them (one fetch on Kafka; the other partitions from ``rest``, a runner's
    stored positions: only what it has not applied, else from their start), stopped once each has given
    its first record or after ``scan`` records, and a partition not met by then read on its own. A
    start beyond a partition's end is the read's ``LogLostError``."""
    if not offsets:
        return {}
    found: dict[int, StoredRecord | None] = {}
    if marks is None:
        found = _first_records(log, offsets, rest or {}, scan)
    missing = [p for p in offsets if p not in found]
    if missing:
        marks = marks if marks is not None else log.high_watermarks()
        for part in missing:
            found.update(_first_records(log, {part: offsets[part]}, marks, 1))
    return found


def _first_records(log: EventLog, offsets: Mapping[int, int], marks: Mapping[int, int], limit: int) -> dict[int, StoredRecord | None]:
    start = {p: marks.get(p, 0) for p in range(log.partitions)}
    start.update(offsets)
    found: dict[int, StoredRecord | None] = {}
    reader = log.read(start, max_records=limit)
    try:
        for rec in reader:
            part = rec.position.partition
            if part in offsets and part not in found:
                found[part] = rec if rec.position.offset == offsets[part] else None
                if len(found) == len(offsets):
                    break
    finally:
        close = getattr(reader, "close", None)
        if close is not None:
            close()
    return found
