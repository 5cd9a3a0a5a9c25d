"""An event log held in this process's memory, for tests that need a log but not a file or a broker.

It keeps the port's promises the way the other adapters do (the same contract suite runs against it):
Kafka's key-to-partition mapping, offsets counted per partition, a dedupe on event id, reads bounded by
the high watermarks of the call, a lost log reported rather than waited on. Logs are named: every
``MemoryLog`` opened with one name in a process sees the same records (as two opens of one SQLite
file do), and closing one forgets nothing. ``forget(name)`` drops a log, as deleting its file would.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from ledger.log.partitioning import record_partition
from ledger.log.polling import follow_by_polling
from ledger.log.port import (
    LogError,
    LogLostError,
    LogMissingError,
    Offsets,
    PendingRecord,
    Position,
    StoredRecord,
)

__all__ = ["MemoryLog", "forget"]

DEFAULT_PARTITIONS = 8


@dataclass
class _Records:
    """One named log: every record in append order, and where each partition's records sit in it."""

    partitions: int
    log_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    records: list[StoredRecord] = field(default_factory=list)
    by_partition: list[list[int]] = field(default_factory=list)  # partition -> indexes into ``records``
    by_event_id: dict[str, Position] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def __post_init__(self) -> None:
        self.by_partition = [[] for _ in range(self.partitions)]


_LOGS: dict[str, _Records] = {}
_LOGS_LOCK = threading.Lock()


def forget(name: str) -> None:
    """Drop the named log (the next open finds none)."""
    with _LOGS_LOCK:
        _LOGS.pop(name, None)


class MemoryLog:
    """An EventLog in memory (see module docstring). ``read_only`` and ``create=False`` open an
    existing log only (``LogMissingError`` if there is none); ``read_only`` also refuses appends."""

    def __init__(self, name: str, *, partitions: int | None = None, read_only: bool = False, create: bool = True) -> None:
        self.name = name
        self.read_only = read_only
        with _LOGS_LOCK:
            held = _LOGS.get(name)
            if held is None:
                if read_only or not create:
                    raise LogMissingError(f"no log named {name!r} in memory: nothing was appended to it in this process")
                held = _LOGS[name] = _Records(partitions or DEFAULT_PARTITIONS)
        if partitions is not None and partitions != held.partitions:
            raise LogError(f"the log {name!r} has {held.partitions} partitions, not {partitions}: the count is fixed when a log is created")
        self._log = held

    @property
    def partitions(self) -> int:
        return self._log.partitions

    @property
    def log_id(self) -> str | None:
        return self._log.log_id

    def append(self, record: PendingRecord) -> Position:
        return self.append_batch([record])[0]

    def append_batch(self, records: Sequence[PendingRecord]) -> list[Position]:
        if self.read_only:
            raise LogError(f"the log {self.name!r} was opened read-only")
        log = self._log
        out: list[Position] = []
        with log.lock:
            for rec in records:
                held = log.by_event_id.get(rec.event_id)
                if held is None:
                    part = record_partition(rec, log.partitions)
                    held = Position(part, len(log.by_partition[part]))
                    log.by_partition[part].append(len(log.records))
                    log.records.append(StoredRecord(held, rec.key, rec.value, int(time.time() * 1000), rec.headers))
                    log.by_event_id[rec.event_id] = held
                out.append(held)
        return out

    def high_watermarks(self) -> dict[int, int]:
        with self._log.lock:
            return {p: len(indexes) for p, indexes in enumerate(self._log.by_partition)}

    def read(self, start: Offsets | None = None, *, max_records: int | None = None) -> Iterator[StoredRecord]:
        log = self._log
        begin = dict(start or {})
        with log.lock:
            marks = self.high_watermarks()
            for part, offset in begin.items():
                if part not in marks:
                    raise LogError(f"partition {part} does not exist; the log has {log.partitions}")
                if offset > marks[part]:
                    raise LogLostError(part, offset, marks[part])
            top = len(log.records)
            starts = [log.by_partition[p][begin.get(p, 0)] for p in marks if begin.get(p, 0) < marks[p]]
        return self._scan(begin, min(starts, default=top), top, max_records)

    def _scan(self, begin: dict[int, int], first: int, top: int, max_records: int | None) -> Iterator[StoredRecord]:
        """Records ``first`` to ``top`` of the append order, less those before a partition's start.
        Records are never changed or removed, so the list can be read outside the lock."""
        records = self._log.records
        given = 0
        for i in range(first, top):
            rec = records[i]
            if rec.position.offset < begin.get(rec.position.partition, 0):
                continue
            if max_records is not None and given >= max_records:
                return
            given += 1
            yield rec

    def follow(
        self,
        start: Offsets | None = None,
        *,
        stop: Callable[[], bool] | None = None,
        poll_interval: float = 0.2,
    ) -> Iterator[StoredRecord]:
        return follow_by_polling(self.read, self.partitions, start, stop, poll_interval)

    def close(self) -> None:
        """Nothing to release: the records stay for the next open of this name."""

    def __enter__(self) -> MemoryLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
