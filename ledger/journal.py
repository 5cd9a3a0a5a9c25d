"""Events in, events out: the log port seen through the codec.

Producers append ``Event`` objects and projections read them back; neither handles bytes. Decoding
errors are not swallowed here: a record this catalogue cannot read is a fact an operator must see.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ledger.codec import Codec, default_codec
from ledger.events import Event
from ledger.log.port import EventLog, Headers, Offsets, PendingRecord, Position, StoredRecord
from ledger.record_headers import event_headers

__all__ = ["Journal", "LoggedEvent", "Seal"]


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """An event with where it sits in the log and the raw bytes it was stored as (for audits)."""

    position: Position
    event: Event[Any]
    raw: bytes
    headers: Headers = ()


Seal = Callable[[str, bytes], tuple[str, bytes]]
"""A writer's seal over (writer, value), as one more header (``ledger.integrity.writer_seals.Sealer.seal``)."""


class Journal:
    """``writer`` names who writes through this journal (recorded in each record's headers, see
    ``ledger.record_headers``): the intake, the importer, an official appending directly. ``seal``, for
    the writers whose word the audit trusts (the intake, the importer), seals each record so that a
    reader can tell their records from one that only claims to be theirs."""

    def __init__(self, log: EventLog, codec: Codec | None = None, *, writer: str = "", seal: Seal | None = None) -> None:
        self.log = log
        self.codec = codec or default_codec()
        self.writer = writer
        self._seal = seal

    def _pending(self, event: Event[Any]) -> PendingRecord:
        value = self.codec.encode(event)
        headers = event_headers(event, value, self.writer)
        if self._seal is not None:
            headers = (*headers, self._seal(self.writer, value))
        return PendingRecord(key=event.key, event_id=event.event_id, value=value, headers=headers)

    def append(self, event: Event[Any]) -> Position:
        return self.log.append(self._pending(event))

    def append_batch(self, events: Sequence[Event[Any]]) -> list[Position]:
        return self.log.append_batch([self._pending(e) for e in events])

    def _decoded(self, records: Iterator[StoredRecord]) -> Iterator[LoggedEvent]:
        decode = self.codec.decode
        for rec in records:
            yield LoggedEvent(rec.position, decode(rec.value), rec.value, rec.headers)

    def read(self, start: Offsets | None = None, *, max_records: int | None = None) -> Iterator[LoggedEvent]:
        return self._decoded(self.log.read(start, max_records=max_records))

    def follow(
        self, start: Offsets | None = None, *, stop: Callable[[], bool] | None = None, poll_interval: float = 0.2
    ) -> Iterator[LoggedEvent]:
        return self._decoded(self.log.follow(start, stop=stop, poll_interval=poll_interval))

    def close(self) -> None:
        self.log.close()
