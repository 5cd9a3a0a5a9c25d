"""Dedupe of appends by event id: a bounded map of the ids this instance appended and where they went.

The quirk it works around: exactly-once cannot come from Kafka transactions here, because Tansu delivers
aborted transactional records to read_committed consumers (DESIGN.md). So a retry of an append (the
caller did not see the acknowledgement) is recognised by its event id and answered with the original
position instead of being written twice. Tansu also keeps data in memory only, so a remembered
position is trusted only while a fetch snapshot shows the log still holds it (``forget_beyond``).

The map is bounded: older duplicates are written again and dropped by the projections, which dedupe
by id as well. On a real Kafka with working transactions this cache could go, with appends made in a
transaction keyed by the idempotency key; the projections' dedupe stays either way.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from ledger.log.port import Position

__all__ = ["RecentIds"]


class RecentIds:
    """Event id -> position of the ``limit`` most recent appends; safe to share between threads."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._ids: OrderedDict[str, Position] = OrderedDict()
        self._lock = threading.Lock()

    def known(self, event_ids: Iterable[str]) -> dict[str, Position]:
        """The remembered positions of those of ``event_ids`` that were appended recently."""
        with self._lock:
            return {eid: self._ids[eid] for eid in event_ids if eid in self._ids}

    def remember(self, event_id: str, position: Position) -> None:
        with self._lock:
            self._ids[event_id] = position
            self._ids.move_to_end(event_id)
            while len(self._ids) > self._limit:
                self._ids.popitem(last=False)

    def forget_beyond(self, marks: Mapping[int, int]) -> None:
        """Forget positions at or above a partition's high watermark: the broker no longer holds them, so
        a retry of those events must write them again."""
        with self._lock:
            gone = [e for e, pos in self._ids.items() if pos.offset >= marks.get(pos.partition, pos.offset + 1)]
            for eid in gone:
                del self._ids[eid]
