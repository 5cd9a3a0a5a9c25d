"""The records a projection stands on are still the log's.

A stored position says "every record of this partition before offset n was applied". The high
watermark check (``ProjectionRunner._check_marks``) catches a log that lost records: it holds fewer
than n. It cannot catch a log that lost them and was written again past n: an older copy of an
embedded log restored, then new reports appended, puts new events at positions the projection has
already passed, and they would be skipped without a trace while the tallies kept results the log no
longer holds.

So when a runner is given a partition, the record just before its stored position is read and looked
up in the projection's event index, which keeps where each applied event sat (a repeat under its first
position). The record must be the event the index has at that position; or a repeat of an event
indexed elsewhere, which the log must still hold there. Anything else means the log was rewound and
refilled (the lost events appended again after new ones included): ``LogRewoundError``, which is a
lost log (exit 3, the same instruction: restore the log, or rebuild the projection from the log as it
now is).

What one record per partition cannot see: a refill that differs only before the last record applied
in every partition. The signed checkpoints check the whole log (``caucus verify``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence

from ledger.codec import Codec, CodecError
from ledger.log.port import EventLog, LogLostError, LogReplacedError, StoredRecord
from ledger.log.records_at import records_at

__all__ = ["LastApplied", "LogRewoundError", "SameLog"]


class LogRewoundError(LogLostError):
    """The log holds, at a position a projection has passed, another event than the one it applied there."""

    def __init__(self, partition: int, offset: int, event_id: str, event_type: str) -> None:
        Exception.__init__(
            self,
            f"log lost or rewound: partition {partition} offset {offset} holds {event_type} {event_id}, not the event this "
            f"projection applied there: the log was replaced by an older copy, or lost, and written again since",
        )
        self.partition = partition
        self.expected = offset + 1
        self.high_watermark = -1


class LastApplied:
    """The check of one set of stored positions. The records are read on a thread of their own, started
    when the partitions are assigned, so the read overlaps the runner's first poll (on Kafka both are
    round trips to the broker) instead of adding to a restarted runner's way to its first batch;
    ``verify`` waits for it and looks the events up in the store, on the runner's thread (a store's
    connection is the runner's)."""

    def __init__(self, log: EventLog, positions: Mapping[int, int], marks: Mapping[int, int] | None = None,
                 rest: Mapping[int, int] | None = None) -> None:
        self.positions = dict(positions)
        self._log = log
        self._records: dict[int, StoredRecord | None] = {}
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._read, args=(marks, rest), name="caucus-log-continuity", daemon=True)
        self._thread.start()

    def _read(self, marks: Mapping[int, int] | None, rest: Mapping[int, int] | None) -> None:
        try:
            self._records = records_at(self._log, {p: n - 1 for p, n in self.positions.items() if n > 0}, marks, rest=rest)
        except BaseException as exc:  # noqa: BLE001 -- raised on the runner's thread, by verify
            self._error = exc

    def verify(self, codec: Codec, indexed_at: Callable[[Sequence[str]], dict[str, tuple[int, int]]]) -> None:
        """``LogRewoundError`` if a record at a stored position is not the event the index has there,
        nor a repeat of an event the log still holds where the index has it; the read's own error as it
        was raised (the log unreachable, or shorter than a stored position: a lost log)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        events = {}
        for part, rec in sorted(self._records.items()):
            if rec is None:
                continue
            try:
                events[part] = (rec, codec.decode_deferred(rec.value, frozenset()))
            except CodecError:
                continue  # not an event: the fold names it when it meets it
        where = indexed_at([event.event_id for _, event in events.values()])
        for part, (rec, event) in events.items():
            at = where.get(event.event_id)
            here = (part, rec.position.offset)
            if at == here or (at is not None and self._still_there(codec, at, event.event_id)):
                continue
            raise LogRewoundError(part, rec.position.offset, event.event_id, event.type)

    def _still_there(self, codec: Codec, at: tuple[int, int], event_id: str) -> bool:
        """A repeat: the log still holds the event where it was first applied (a producer's retry that
        landed twice), not an event appended again after a rewind, whose first place now holds another."""
        rec = records_at(self._log, {at[0]: at[1]}, self._log.high_watermarks()).get(at[0])
        if rec is None:
            return False
        try:
            return codec.decode_deferred(rec.value, frozenset()).event_id == event_id
        except CodecError:
            return False


class SameLog:
    """The check that a Kafka topic is still the log a projection was built from, by its id.

    Positions cannot tell a log lost and made again before the projection applied anything from it
    (every stored position is 0, and an empty topic holds "everything before 0"): a memory-only broker
    that restarts while a runner joins its group, and the runner's own consumer, which makes the
    missing topic again, leave an empty topic of the same name, and the run would end "caught up"
    with the old log's projection standing on a new log. The id is read again after each group join
    and before a run says it is caught up; a log whose id is gone or another is ``LogReplacedError``
    (exit 3). A log that cannot be read again (the embedded one: its file's replacement is caught
    where it is opened) or a projection that names no log id is not checked."""

    def __init__(self, log: EventLog | None, source: str | None) -> None:
        self._read_now: Callable[[], str | None] | None = getattr(log, "log_id_now", None)
        self._expected = source[4:] if source is not None and source.startswith("log:") else None
        self._where = f"topic {getattr(log, 'topic', '?')!r} on {getattr(log, 'bootstrap', '?')}"

    def verify(self) -> None:
        """``LogReplacedError`` unless the log's id now is the one the projection names."""
        if self._read_now is None or self._expected is None:
            return
        now = self._read_now()
        if now == self._expected:
            return
        found = f"now holds log {now}" if now is not None else "now holds a log with no id"
        raise LogReplacedError(
            f"{self._where} {found}, not log {self._expected}, which this projection was built from: the broker lost "
            "the topic (a memory-only broker that restarted) and it was made again, or another log is in its place. "
            "Restore the log, or rebuild the projection from the log as it now is with `caucus replay --new-log`"
        )
