"""Where a runner's records come from: the embedded log, or a Kafka consumer group.

Why a source of its own rather than ``EventLog.follow``: a runner must start each partition at the
position stored with its view (not where the broker thinks the group is), learn which partitions it
owns when a group rebalances, and seek back when it finds that another runner moved a partition.
Both sources give the same three things: records in per-partition order, the set of partitions this
runner owns (with a callback when it changes), and high watermarks for lag and ``--until-caught-up``.

Kafka specifics (DESIGN.md, broker quirks): positions come from the store on every assignment and
are set with ``seek``; nothing is committed to the broker; ``end_offsets`` is never used, the
high watermark comes from fetch responses (``consumer.highwater``). A stored position above that
high watermark is a lost log; the runner raises ``LogLostError`` for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

from ledger.log.port import EventLog, LogLostError, LogUnavailableError, StoredRecord

__all__ = ["AssignmentListener", "Source", "EmbeddedSource", "KafkaGroupSource"]


class AssignmentListener(Protocol):
    def assigned(self, partitions: set[int]) -> dict[int, int]:
        """Partitions now owned; returns where to start each (the stored positions)."""
        ...

    def revoked(self, partitions: set[int]) -> None: ...


class Source(Protocol):
    description: str

    def start(self, listener: AssignmentListener) -> None: ...

    def poll(self, max_records: int, timeout: float) -> list[StoredRecord]: ...

    def seek(self, partition: int, offset: int) -> None: ...

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

    def close(self) -> None: ...


class EmbeddedSource:
    """All partitions of a log read through the ``EventLog`` port (the embedded SQLite log).

    The embedded log has no groups: one runner owns every partition. A second runner on the same
    set is still safe (the store's lock and position check), just wasteful.
    """

    def __init__(self, log: EventLog, *, description: str = "", hw_refresh: float = 0.5, sleep: Callable[[float], None] = time.sleep) -> None:
        self.log = log
        self.description = description or "embedded log"
        self._next: dict[int, int] = {}
        self._marks: dict[int, int] = {}
        self._marks_at = 0.0
        self._refresh = hw_refresh
        self._sleep = sleep
        self._started = False

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

    def poll(self, max_records: int, timeout: float) -> list[StoredRecord]:
        records = list(self.log.read(self._next, max_records=max_records))
        for rec in records:
            self._next[rec.position.partition] = rec.position.offset + 1
        if not records and timeout > 0:
            self._sleep(min(timeout, 0.2))
        return records

    def high_watermarks(self) -> dict[int, int]:
        now = time.monotonic()
        if not self._marks or now - self._marks_at >= self._refresh:
            self._marks = self.log.high_watermarks()
            self._marks_at = now
        # The cached marks may trail what poll() already read.
        return {p: max(m, self._next.get(p, 0)) for p, m in self._marks.items()}

    def positions(self) -> dict[int, int]:
        return dict(self._next)

    def close(self) -> None:
        self.log.close()


class KafkaGroupSource:
    """A consumer in group ``group_id`` on a ``KafkaLog``'s topic, positioned from the store.

    The consumer comes from ``KafkaLog.consumer`` (so it is configured like every other reader: no
    auto-commit, ``auto_offset_reset='none'``, no topic auto-creation, the topic checked first). When
    nothing arrives for ``quiet_check`` seconds the log is asked for a fresh high-watermark snapshot,
    so a broker that restarted empty (the topic gone or re-created) surfaces as a lost log instead of
    a consumer waiting forever, and an unreachable one as ``LogUnavailableError``.
    """

    def __init__(
        self,
        log: Any,
        group_id: str,
        *,
        max_poll_records: int = 500,
        session_timeout_ms: int | None = None,
        fetch_max_wait_ms: int = 200,
        quiet_check: float = 10.0,
    ) -> None:
        self.log = log
        self.topic: str = log.topic
        self.group_id = group_id
        self.description = f"kafka://{log.bootstrap}/{log.topic} group {group_id}"
        self._overrides: dict[str, Any] = {"max_poll_records": max_poll_records, "fetch_max_wait_ms": fetch_max_wait_ms}
        if session_timeout_ms is not None:
            self._overrides["session_timeout_ms"] = session_timeout_ms
            self._overrides["heartbeat_interval_ms"] = max(100, session_timeout_ms // 4)
        self._quiet_check = quiet_check
        self._quiet_since = time.monotonic()
        self._checked: dict[int, int] = {}
        self._consumer: Any = None
        self._owned: set[int] = set()
        self._ready = False

    def start(self, listener: AssignmentListener) -> None:
        from kafka import TopicPartition
        from kafka.consumer.subscription_state import ConsumerRebalanceListener

        consumer = self.log.consumer(group_id=self.group_id, **self._overrides)
        self._consumer = consumer
        source = self

        class _Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                parts = {tp.partition for tp in revoked if tp.topic == source.topic}
                source._owned -= parts
                if parts:
                    listener.revoked(parts)

            def on_partitions_assigned(self, assigned: Any) -> None:
                parts = {tp.partition for tp in assigned if tp.topic == source.topic}
                source._owned |= parts
                source._ready = True
                if parts:
                    start = listener.assigned(parts)
                    for p in parts:
                        consumer.seek(TopicPartition(source.topic, p), start.get(p, 0))

        consumer.subscribe([self.topic], listener=_Listener())

    @property
    def ready(self) -> bool:
        return self._ready

    def assigned(self) -> set[int]:
        return set(self._owned)

    def seek(self, partition: int, offset: int) -> None:
        from kafka import TopicPartition

        self._consumer.seek(TopicPartition(self.topic, partition), offset)

    def poll(self, max_records: int, timeout: float) -> list[StoredRecord]:
        from kafka import errors as kafka_errors

        try:
            batches = self._consumer.poll(timeout_ms=int(timeout * 1000), max_records=max_records)
        except kafka_errors.OffsetOutOfRangeError as exc:
            # A real Kafka refuses to fetch beyond the log end: the log was lost or rewound.
            (fetched,) = exc.args
            tp, offset = next(iter(fetched.items()))
            raise LogLostError(tp.partition, offset, self.log.high_watermarks()[tp.partition]) from exc
        except (kafka_errors.KafkaTimeoutError, kafka_errors.KafkaConnectionError) as exc:
            raise LogUnavailableError(f"cannot fetch from {self.log.bootstrap}: {exc}") from exc
        out: list[StoredRecord] = []
        for tp, msgs in batches.items():
            if tp.partition in self._owned:
                out.extend(self.log.stored(m) for m in msgs)
        now = time.monotonic()
        if out:
            self._quiet_since = now
        elif self._ready and now - self._quiet_since >= self._quiet_check:
            self._quiet_since = now
            # Every partition, owned or not: a broker that restarted empty also breaks the group, and
            # the runner holds the marks against the positions it knows were applied (runner._check_marks).
            self._checked = self.log.high_watermarks()  # raises LogUnavailableError when the broker is gone
        return out

    def high_watermarks(self) -> dict[int, int]:
        from kafka import TopicPartition

        out: dict[int, int] = {}
        for p in self._owned:
            try:
                hw = self._consumer.highwater(TopicPartition(self.topic, p))
            except Exception:  # noqa: BLE001 - partition revoked between calls
                hw = None
            if hw is not None:
                out[p] = hw
        if self._checked:
            out.update(self._checked)  # fresher than the last fetch response
            self._checked = {}
        return out

    def positions(self) -> dict[int, int]:
        from kafka import TopicPartition

        out: dict[int, int] = {}
        for p in self._owned:
            try:
                pos = self._consumer.position(TopicPartition(self.topic, p), timeout_ms=0)
            except Exception:  # noqa: BLE001 - not known yet, or revoked meanwhile
                continue
            if pos is not None:
                out[p] = pos
        return out

    def close(self) -> None:
        try:
            if self._consumer is not None:
                self._consumer.close(autocommit=False)
        finally:
            self._consumer = None
            self.log.close()
