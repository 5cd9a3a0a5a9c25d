"""Where a runner's records come from: the embedded log, or a Kafka consumer group.

Why a source of its own rather than ``EventLog.follow``: a runner must start each partition at the
position stored with its view (not where the broker thinks the group is), learn which partitions it
owns when a group rebalances, and seek back when it finds that another runner moved a partition.
Both sources give the same three things: records in per-partition order, the set of partitions this
runner owns (with a callback when it changes), and high watermarks for lag and ``--until-caught-up``.

The Kafka consumer group's source is ``projections.kafka_source``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Protocol

from ledger.log.partitioning import partition_for
from ledger.log.port import EventLog, StoredRecord

__all__ = ["AssignmentListener", "Source", "EmbeddedSource"]


class AssignmentListener(Protocol):
    """The runner, as a source sees it. A listener may also offer ``work_left()`` (records each
    partition holds beyond the store's position): a Kafka group's leader splits by it."""

    def assigned(self, partitions: set[int]) -> dict[int, int]:
        """Partitions now owned; returns where to start each (the stored positions)."""
        ...

    def revoked(self, partitions: set[int]) -> None: ...


class Source(Protocol):
    description: str

    @property
    def shares_partitions(self) -> bool:
        """Whether another runner may be handed this source's partitions while it reads them (a consumer
        group): only then can a batch's base move between a fold before the lock and the lock, so only
        then does the runner fold before it (``projections.early_fold``)."""
        ...

    def start(self, listener: AssignmentListener) -> None: ...

    def poll(self, max_records: int, timeout: float) -> list[StoredRecord]: ...

    def seek(self, partition: int, offset: int) -> None: ...

    def read_first(self, keys: Iterable[str]) -> None:
        """A hint for the next poll: read the partitions these keys go to (those this source owns)
        before the others. Why: an election's results folded before its definition are all tallied
        again, under the set's lock, when the definition comes (``batch_fold``), so the runner asks
        for the definition's partition as soon as it meets an election it does not know. Which
        partition is read first never changes what is applied, only when."""
        ...

    def others_moved(self, partitions: Iterable[int]) -> None:
        """A hint: another runner applied records of these partitions while this one read them (its
        batch of them was found applied). A source that reads partitions no group gave it may leave
        them to that runner."""
        ...

    def assigned(self) -> set[int]: ...

    @property
    def ready(self) -> bool:
        """True once the source knows its assignment (a group has been joined)."""
        ...

    def high_watermarks(self) -> dict[int, int]:
        """Known high watermarks of the owned partitions (a Kafka partition's appears after its first
        fetch); a source may add other partitions' (the Kafka source does after a quiet spell)."""
        ...

    def positions(self) -> dict[int, int]:
        """Where reading stands in each owned partition (next offset to fetch)."""
        ...

    def log_high_watermarks(self) -> dict[int, int]:
        """A fresh high watermark of every partition of the log, owned or not (``--until-caught-up``
        in a group waits for the whole log: ``projections.whole_log``)."""
        ...

    def close(self) -> None: ...


class EmbeddedSource:
    """All partitions of a log read through the ``EventLog`` port (the embedded SQLite log).

    The embedded log has no groups: one runner owns every partition. A second runner on the same
    set is still safe (the store's lock and position check), just wasteful.
    """

    shares_partitions = False

    def __init__(self, log: EventLog, *, description: str = "", hw_refresh: float = 0.5, sleep: Callable[[float], None] = time.sleep) -> None:
        self.log = log
        self.description = description or "embedded log"
        self._next: dict[int, int] = {}
        self._marks: dict[int, int] = {}
        self._marks_at = 0.0
        self._refresh = hw_refresh
        self._sleep = sleep
        self._started = False
        self._first: set[int] = set()

    def start(self, listener: AssignmentListener) -> None:
        parts = set(range(self.log.partitions))
        start = listener.assigned(parts)
        self._next = {p: start.get(p, 0) for p in parts}
        self._started = True

    @property
    def ready(self) -> bool:
        return self._started

    def assigned(self) -> set[int]:
        return set(self._next)

    def seek(self, partition: int, offset: int) -> None:
        self._next[partition] = offset

    def read_first(self, keys: Iterable[str]) -> None:
        self._first = {partition_for(key, self.log.partitions) for key in keys}

    def others_moved(self, partitions: Iterable[int]) -> None:
        pass  # no groups: this runner owns every partition whoever else reads them

    def poll(self, max_records: int, timeout: float) -> list[StoredRecord]:
        records = self._read_first(max_records) if self._first else []
        if not records:
            records = list(self.log.read(self._next, max_records=max_records))
        for rec in records:
            self._next[rec.position.partition] = rec.position.offset + 1
        if not records and timeout > 0:
            self._sleep(min(timeout, 0.2))
        return records

    def _read_first(self, max_records: int) -> list[StoredRecord]:
        """``read_first``'s partitions alone: the others start at their marks (the port reads every
        partition) and whatever of theirs was appended since is left for the next poll."""
        first, self._first = self._first, set()
        marks = self.log.high_watermarks()
        first = {p for p in first if p in self._next and self._next[p] < marks.get(p, 0)}
        if not first:
            return []
        start = {p: self._next[p] if p in first else marks.get(p, 0) for p in self._next}
        return [r for r in self.log.read(start, max_records=max_records) if r.position.partition in first]

    def high_watermarks(self) -> dict[int, int]:
        now = time.monotonic()
        if not self._marks or now - self._marks_at >= self._refresh:
            self._marks = self.log.high_watermarks()
            self._marks_at = now
        # The cached marks may trail what poll() already read.
        return {p: max(m, self._next.get(p, 0)) for p, m in self._marks.items()}

    def positions(self) -> dict[int, int]:
        return dict(self._next)

    def log_high_watermarks(self) -> dict[int, int]:
        return self.log.high_watermarks()

    def close(self) -> None:
        self.log.close()
