"""The records a projection stands on are still the log's.

A stored position says "every record of this partition before offset n was applied". The high
watermark check (``ProjectionRunner._check_marks``) catches a log that lost records: it holds fewer
than n. It cannot catch a log that lost them and was written again past n: an older copy of an
embedded log restored, then new reports appended, puts new events at positions the projection has
already passed, and they would be skipped without a trace while the tallies kept results the log no
longer holds.

So when a runner is given a partition, the record just before its stored position is read and its
event id looked up in the projection's event index (every applied event is indexed, duplicates
under their first position). An event the projection never applied there means the log was rewound
and refilled: ``LogRewoundError``, which is a lost log (exit 3, the same instruction: restore the log,
or rebuild the projection from the log as it now is).

What one record per partition cannot see: a refill that differs only before the last record applied
in every partition. The signed checkpoints check the whole log (``caucus verify``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

from ledger.codec import Codec, CodecError
from ledger.log.port import EventLog, LogLostError, StoredRecord

__all__ = ["LastApplied", "LogRewoundError", "records_at"]


class LogRewoundError(LogLostError):
    """The log holds, at a position a projection has passed, an event the projection never applied."""

    def __init__(self, partition: int, offset: int, event_id: str, event_type: str) -> None:
        Exception.__init__(
            self,
            f"log lost or rewound: partition {partition} offset {offset} holds {event_type} {event_id}, an event this "
            f"projection never applied (it applied another one there): the log was replaced by an older copy, or lost, "
            f"and written again since",
        )
        self.partition = partition
        self.expected = offset + 1
        self.high_watermark = -1


def records_at(log: EventLog, offsets: Mapping[int, int], *, scan: int = 10_000) -> dict[int, StoredRecord | None]:
    """The record at each ``partition: offset`` (None where the log holds none there: a gap a Kafka
    transaction marker leaves). One read from all of them at once (one fetch on Kafka; the other
    partitions from their start, which a runner's check meets only for partitions it has applied
    nothing of), stopped once each has given its first record or after ``scan`` records. A partition
    not met by then (an embedded log reads in append order, and one partition's last record may lie far
    behind the others') is read on its own, the others from their high watermarks. A start beyond a
    partition's end is the read's ``LogLostError``."""
    if not offsets:
        return {}
    found = _first_records(log, offsets, {}, scan)
    missing = [p for p in offsets if p not in found]
    if missing:
        marks = log.high_watermarks()
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


class LastApplied:
    """The check of one set of stored positions. The records are read on a thread of their own, started
    when the partitions are assigned, so the read overlaps the runner's first poll (on Kafka both are
    round trips to the broker) instead of adding to a restarted runner's way to its first batch;
    ``verify`` waits for it and looks the events up in the store, on the runner's thread (a store's
    connection is the runner's)."""

    def __init__(self, log: EventLog, positions: Mapping[int, int]) -> None:
        self.positions = dict(positions)
        self._records: dict[int, StoredRecord | None] = {}
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, args=(log,), name="caucus-log-continuity", daemon=True)
        self._thread.start()

    def _read(self, log: EventLog) -> None:
        try:
            self._records = records_at(log, {p: n - 1 for p, n in self.positions.items() if n > 0})
        except BaseException as exc:  # noqa: BLE001 -- raised on the runner's thread, by verify
            self._error = exc

    def verify(self, codec: Codec, processed: Callable[[Sequence[str]], set[str]]) -> None:
        """``LogRewoundError`` if an event at a stored position is one ``processed`` does not know; the
        read's own error as it was raised (the log unreachable, or shorter than a stored position: a
        lost log)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        for part, rec in sorted(self._records.items()):
            if rec is None:
                continue
            try:
                event = codec.decode_deferred(rec.value, frozenset())
            except CodecError:
                continue  # not an event: the fold names it when it meets it
            event_id = event.envelope.event_id
            if not processed([event_id]):
                raise LogRewoundError(part, rec.position.offset, event_id, event.type)
