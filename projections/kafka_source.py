"""A runner's records from a Kafka consumer group (``projections.sources`` says what a source gives).

Kafka specifics (DESIGN.md, broker quirks): positions come from the store on every assignment and
are set with ``seek``; ``end_offsets`` is never used, the high watermark comes from fetch responses
(``consumer.highwater``). A stored position above that high watermark is a lost log; the runner
raises ``LogLostError`` for it.

Offsets are also committed to the group (``mirror``), after each committed batch, as a copy of the
store's positions: so the cluster's own lag tools (``kafka-consumer-groups``, Burrow, an exporter)
see the runners. The copy is never read back (Tansu drops commit metadata, and the store's positions
are the ones committed with the view); a failed commit is logged and forgotten.

A fast first start (``static_start``): joining a group takes about a second on Tansu even with a short
session (half the session timeout with a long one, 5 s at the default 10 s), and reports sent meanwhile
would wait that long for the tally. So the source first reads every partition through a consumer of
its own, assigned by hand from the store's positions, while the group consumer joins on a thread of
its own (a join needs long polls: short ones restart it); the group's first assignment is only noted
there, and the runner's thread hands over at its next poll (every partition revoked, the assigned ones
started again from the store). A runner already in the group may read the same partitions meanwhile: the store's exactly-once
rules (``projections.exactly_once``: ``CHECK_UNDER_LOCK``, ``BELOW_STORED_POSITION``) make that
harmless, as after any rebalance; a partition another runner is found moving is left to it until the
hand-over (``others_moved``). The group then splits the partitions by the records left in each, not by
their number (``projections.lag_assignor``): what each runner read first is not what the group gives it.

Liveness: a consumer group left broken (members killed without leaving, on a broker that never
expires them) can leave a runner without any partition, waiting forever. With
``no_partition_timeout`` the source rejoins once with a new consumer after holding no partition for
that long, and if that does not help either raises ``NoPartitionsError`` saying why.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ledger.log.partitioning import partition_for
from ledger.log.port import LogError, LogLostError, LogUnavailableError, StoredRecord
from projections.kafka_first_reads import FirstReads
from projections.sources import AssignmentListener

__all__ = ["KafkaGroupSource", "NoPartitionsError"]

log = logging.getLogger(__name__)

STATIC_FETCH_BYTES = 64 * 1024
"""The static consumer's fetches stop at this much of each partition (the group consumer's at 1 MiB), so
that its polls take every partition in turn: two runners started together each advance theirs evenly,
and whichever way the group then splits the partitions, neither is left with more to do."""


def _assignors(listener: AssignmentListener, topic: str) -> tuple[Any, ...]:
    """The assignors a member offers its group, the one that splits by the work left first
    (``projections.lag_assignor``: the leader asks its runner, ``work_left``, for what each
    partition holds beyond the store's position)."""
    from kafka.coordinator.assignors.range import RangePartitionAssignor
    from kafka.coordinator.assignors.roundrobin import RoundRobinPartitionAssignor

    from projections.lag_assignor import LagAssignor

    work_left: Callable[[], Mapping[int, int]] = getattr(listener, "work_left", dict)
    return (LagAssignor(work_left, topic), RangePartitionAssignor, RoundRobinPartitionAssignor)


class NoPartitionsError(LogError):
    """A runner held no partition for longer than its bound, even after rejoining the group."""


class KafkaGroupSource:
    """A consumer in group ``group_id`` on a ``KafkaLog``'s topic, positioned from the store.

    The consumer comes from ``KafkaLog.consumer`` (so it is configured like every other reader: no
    auto-commit, ``auto_offset_reset='none'``, no topic auto-creation, the topic checked first). When
    nothing arrives for ``quiet_check`` seconds the log is asked for a fresh high-watermark snapshot,
    so a broker that restarted empty (the topic gone or re-created) surfaces as a lost log instead of
    a consumer waiting forever, and an unreachable one as ``LogUnavailableError``.
    """

    shares_partitions = True

    def __init__(
        self,
        log: Any,
        group_id: str,
        *,
        max_poll_records: int = 500,
        session_timeout_ms: int | None = None,
        fetch_max_wait_ms: int = 200,
        quiet_check: float = 10.0,
        no_partition_timeout: float = 0.0,
        static_start: bool = True,
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
        self.no_partition_timeout = no_partition_timeout
        self._without_since: float | None = None
        self._rejoined = 0
        self._listener: AssignmentListener | None = None
        self._mirrored: dict[int, int] = {}
        self.mirror_failures = 0
        self._static_start = static_start
        self._joining: Any = None  # the group consumer while the static one reads (module docstring)
        self._joined: set[int] | None = None  # its first assignment, noted by the joining thread
        self._join_thread: threading.Thread | None = None
        self._closing = threading.Event()
        self._left: set[int] = set()  # partitions others_moved left to another runner until the hand-over
        self._first = FirstReads(lambda: self.log.consumer(**self._overrides), self.topic)  # read_first

    def without_partitions_for(self) -> float | None:
        """Seconds this runner has held no partition (since it started or lost its last), or None."""
        return None if self._without_since is None else time.monotonic() - self._without_since

    def start(self, listener: AssignmentListener) -> None:
        self._listener = listener
        self._without_since = time.monotonic()
        if self._static_start:
            self._start_static(listener)
        self._join(listener)

    def _start_static(self, listener: AssignmentListener) -> None:
        from kafka import TopicPartition

        consumer = self.log.consumer(**{**self._overrides, "max_partition_fetch_bytes": STATIC_FETCH_BYTES})
        parts = set(range(self.log.partitions))
        consumer.assign([TopicPartition(self.topic, p) for p in sorted(parts)])
        self._start_from_store(consumer, parts, listener)
        self._consumer, self._owned, self._ready, self._without_since = consumer, parts, True, None
        log.info("reading partitions %s while joining group %s", sorted(parts), self.group_id)

    def _join_in_background(self, consumer: Any) -> None:
        from kafka import errors as kafka_errors

        def run() -> None:
            while self._joined is None and not self._closing.is_set():
                try:
                    consumer.poll(timeout_ms=200, max_records=1)
                except kafka_errors.NoOffsetForPartitionError:
                    pass  # assigned, not yet positioned: the runner's thread seeks at the hand-over
                except Exception:  # noqa: BLE001 -- the runner's thread meets the error on its own polls
                    log.debug("joining group %s failed", self.group_id, exc_info=True)
                    return

        self._join_thread = threading.Thread(target=run, name=f"join-{self.group_id}", daemon=True)
        self._join_thread.start()

    def _end_static(self, listener: AssignmentListener) -> None:
        """The group has assigned partitions: stop reading through the static consumer, start the
        assigned partitions of the group consumer from the store."""
        if self._join_thread is not None:
            self._join_thread.join()
        static, self._consumer, self._joining = self._consumer, self._joining, None
        parts, self._owned, self._left = self._owned, set(), set()
        self._first.forget()
        if parts:
            listener.revoked(parts)
        try:
            static.close(autocommit=False)
        except Exception:  # noqa: BLE001 -- its reads are over either way
            log.debug("closing the static consumer failed", exc_info=True)
        assigned, self._joined = self._joined or set(), None
        log.info("group %s assigned partitions %s", self.group_id, sorted(assigned))
        self._owned = set(assigned)
        if assigned:
            self._start_from_store(self._consumer, assigned, listener)
        else:
            self._without_since = time.monotonic()

    def _join(self, listener: AssignmentListener) -> None:
        from kafka.consumer.subscription_state import ConsumerRebalanceListener

        consumer = self.log.consumer(group_id=self.group_id, partition_assignment_strategy=_assignors(listener, self.topic),
                                     **self._overrides)
        if self._consumer is not None and self._static_start and not self._rejoined:
            self._joining = consumer
        else:
            self._consumer = consumer
        source = self

        class _Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked: Any) -> None:
                parts = {tp.partition for tp in revoked if tp.topic == source.topic}
                source._owned -= parts
                if parts:
                    source._first.forget()
                for p in parts:
                    source._mirrored.pop(p, None)
                if parts:
                    log.info("group %s revoked partitions %s", source.group_id, sorted(parts))
                    listener.revoked(parts)
                if not source._owned and source._without_since is None:
                    source._without_since = time.monotonic()

            def on_partitions_assigned(self, assigned: Any) -> None:
                parts = {tp.partition for tp in assigned if tp.topic == source.topic}
                if source._joining is consumer:  # on the joining thread: only note it (module docstring)
                    source._joined = parts
                    return
                source._owned |= parts
                source._ready = True
                if parts:
                    log.info("group %s assigned partitions %s", source.group_id, sorted(parts))
                    source._without_since = None
                    source._rejoined = 0
                    source._start_from_store(consumer, parts, listener)

        consumer.subscribe([self.topic], listener=_Listener())
        if self._joining is consumer:
            self._join_in_background(consumer)

    @property
    def ready(self) -> bool:
        return self._ready

    def assigned(self) -> set[int]:
        return set(self._owned)

    def seek(self, partition: int, offset: int) -> None:
        from kafka import TopicPartition

        self._consumer.seek(TopicPartition(self.topic, partition), offset)

    def others_moved(self, partitions: Iterable[int]) -> None:
        """While the static consumer reads (module docstring), partitions another runner moves are
        left to it: they are dropped from the static consumer (never its last) and revoked. Two
        runners started together would otherwise read the same partitions, one of them in vain,
        until the group splits them."""
        from kafka import TopicPartition

        if self._joining is None:
            return  # in the group (or joined without a static start): the group decides
        drop = set(partitions) & self._owned
        keep = self._owned - drop or {min(drop, default=-1)}  # never its last: a consumer must hold one to poll
        drop -= keep
        if not drop:
            return
        self._consumer.assign([TopicPartition(self.topic, p) for p in sorted(keep)])
        self._owned = keep
        self._left |= drop
        self._first.forget()
        log.info("partitions %s are read by another runner: left to it until group %s assigns them", sorted(drop), self.group_id)
        if self._listener is not None:
            self._listener.revoked(drop)

    def _take_back_left(self) -> None:
        """The group join ended without an assignment (its thread failed): what was left to another
        runner is read again by the static consumer, from the store's positions, as at the start."""
        from kafka import TopicPartition

        back, self._left = self._left, set()
        log.warning("joining group %s failed; reading partitions %s again", self.group_id, sorted(back))
        self._owned |= back
        self._consumer.assign([TopicPartition(self.topic, p) for p in sorted(self._owned)])
        if self._listener is not None:
            self._start_from_store(self._consumer, back, self._listener)

    def _start_from_store(self, consumer: Any, parts: set[int], listener: AssignmentListener) -> None:
        """Partitions this runner takes up are read on from what the store applied, never from the
        consumer's own idea of where it was: the store is the one record of what is done."""
        from kafka import TopicPartition

        start = listener.assigned(parts)
        for p in parts:
            consumer.seek(TopicPartition(self.topic, p), start.get(p, 0))

    def read_first(self, keys: Iterable[str]) -> None:
        self._first.ask(partition_for(key, self.log.partitions) for key in keys)

    def poll(self, max_records: int, timeout: float) -> list[StoredRecord]:
        from kafka import errors as kafka_errors

        try:
            if self._joined is not None and self._listener is not None:
                self._end_static(self._listener)
            elif self._left and self._join_thread is not None and not self._join_thread.is_alive():
                self._take_back_left()
            batches = self._first.poll(self._consumer, self._owned, max_records, timeout) if self._first.asked else None
            if batches is None:
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
        self._check_held(now)
        if out:
            self._quiet_since = now
        elif self._ready and now - self._quiet_since >= self._quiet_check:
            self._quiet_since = now
            # Every partition, owned or not: a broker that restarted empty also breaks the group, and
            # the runner holds the marks against the positions it knows were applied (runner._check_marks).
            self._checked = self.log.high_watermarks()  # raises LogUnavailableError when the broker is gone
        return out

    def _check_held(self, now: float) -> None:
        """The liveness bound (module docstring): rejoin once, then give up saying why."""
        if self.no_partition_timeout <= 0 or self._owned or self._without_since is None:
            return
        waited = now - self._without_since
        if waited < self.no_partition_timeout:
            return
        if self._rejoined == 0 and self._listener is not None:
            self._rejoined = 1
            log.warning("this runner has held no partition of topic %r in group %r for %.0f s; rejoining the group "
                        "with a new consumer", self.topic, self.group_id, waited)
            old, self._consumer = self._consumer, None
            try:
                old.close(autocommit=False)
            except Exception:  # noqa: BLE001 -- the old member is being abandoned either way
                log.debug("closing the old consumer failed", exc_info=True)
            self._ready = False
            self._without_since = time.monotonic()
            self._join(self._listener)
            return
        raise NoPartitionsError(
            f"this runner held no partition of topic {self.topic!r} in consumer group {self.group_id!r} for "
            f"{self.no_partition_timeout:g} s, and a new consumer got none either. The group may be left broken by "
            "runners that were killed without leaving it (a broker that never expires their sessions keeps them): "
            "stop the other runners of the group, or start this one with another --group (positions come from the "
            "store, so nothing is lost or applied twice); --no-partition-timeout 0 waits as long as it takes"
        )

    def mirror(self, positions: Mapping[int, int]) -> None:
        """Commit the store's positions of the owned partitions to the group (module docstring): a
        copy for the cluster's lag tools, sent without waiting, never read back."""
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        if self._consumer is None or self._joining is not None:
            return  # the static consumer is in no group
        offsets = {
            TopicPartition(self.topic, p): OffsetAndMetadata(off, "", -1)
            for p, off in positions.items()
            if p in self._owned and self._mirrored.get(p) != off
        }
        if not offsets:
            return

        def done(sent: Any, result: Any) -> None:
            if isinstance(result, BaseException):
                self.mirror_failures += 1
                log.info("committing positions to group %s failed (a copy only; the store has them): %s",
                         self.group_id, result)

        try:
            self._consumer.commit_async(offsets, callback=done)
        except Exception as exc:  # noqa: BLE001 -- a copy: a failure must never stop the runner
            self.mirror_failures += 1
            log.info("committing positions to group %s failed (a copy only; the store has them): %s", self.group_id, exc)
            return
        self._mirrored.update({tp.partition: meta.offset for tp, meta in offsets.items()})

    def high_watermarks(self) -> dict[int, int]:
        from kafka import TopicPartition

        out: dict[int, int] = {}
        for p in self._owned:
            tp = TopicPartition(self.topic, p)
            try:
                hw = self._consumer.highwater(tp)
            except Exception:  # noqa: BLE001 - partition revoked between calls
                hw = None
            marks = [m for m in (hw, self._first.highwater(tp)) if m is not None]  # read ahead: another consumer's fetch
            if marks:
                out[p] = max(marks)
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

    def log_high_watermarks(self) -> dict[int, int]:
        return self.log.high_watermarks()  # raises LogUnavailableError when the broker is gone

    def close(self) -> None:
        self._closing.set()
        if self._join_thread is not None:
            self._join_thread.join(timeout=5)
        try:
            for consumer in (self._joining, self._consumer):
                if consumer is not None:
                    try:
                        consumer.close(autocommit=False)
                    except Exception:  # noqa: BLE001 -- closing the others and the log matters more
                        log.debug("closing a consumer failed", exc_info=True)
            self._first.close()
        finally:
            self._consumer = self._joining = None
            self.log.close()
