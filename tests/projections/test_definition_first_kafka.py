"""A Kafka runner reads an election's definition as soon as it meets units of the election it has no
definition of (``Source.read_first``, ``ProjectionRunner._ask_definitions``): the partition asked for
comes next, and nothing of the others is skipped or read twice for it."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ledger.event_values import election_key
from ledger.log.kafka import KafkaLog, provision_topic
from ledger.log.partitioning import partition_for
from ledger.log.port import StoredRecord
from projections.kafka_source import KafkaGroupSource
from projections.reducers import Projection
from projections.runner import ProjectionRunner
from projections.stores.port import ProjectionStore
from projections.tally import compute_unit_tally, election_context

PARTS = 8
SESSION_MS = 2000


class _Positions:
    """The store's part in an assignment: where each partition was read up to."""

    def __init__(self) -> None:
        self.next: dict[int, int] = {}

    def assigned(self, partitions: set[int]) -> dict[int, int]:
        return {p: self.next.get(p, 0) for p in partitions}

    def revoked(self, partitions: set[int]) -> None:
        pass


def _poll_until(source: KafkaGroupSource, done: Callable[[list[StoredRecord]], bool], got: list[StoredRecord],
                at: _Positions, batch: int) -> list[StoredRecord]:
    deadline = time.monotonic() + 60
    while not done(got):
        assert time.monotonic() < deadline, f"read {len(got)} records in 60 s"
        more = source.poll(batch, 0.5)
        for rec in more:
            at.next[rec.position.partition] = rec.position.offset + 1
        got.extend(more)
    return got


def _election_in_last_partition() -> str:
    """An election id whose events go to the last partition: the one a consumer reads last."""
    return next(e for e in (f"e{i}" for i in range(1, 1000)) if partition_for(election_key(e), PARTS) == PARTS - 1)


def test_the_partition_asked_for_comes_next_and_nothing_is_skipped(
        support: ModuleType, kafka_bootstrap: str, unique_topic: str) -> None:
    provision_topic(kafka_bootstrap, unique_topic, PARTS)
    election = _election_in_last_partition()
    events = support.election_log(80, election_id=election, definition_last=True)
    support.produce(kafka_bootstrap, unique_topic, events, PARTS)
    wanted = PARTS - 1
    log = KafkaLog(kafka_bootstrap, unique_topic, partitions=PARTS, session_timeout_ms=SESSION_MS)
    source = KafkaGroupSource(log, f"g-{unique_topic}", max_poll_records=5)
    at = _Positions()
    source.start(at)
    try:
        batch = 5
        got = _poll_until(source, lambda g: bool(g) and g[-1].position.partition != wanted, [], at, batch)
        assert at.next.get(wanted, 0) < sum(1 for e in events if partition_for(e.key, PARTS) == wanted)
        source.read_first([election_key(election)])
        before = len(got)
        _poll_until(source, lambda g: len(g) > before, got, at, batch)
        assert {r.position.partition for r in got[before:]} == {wanted}, "the next records are the election's partition's"
        _poll_until(source, lambda g: len(g) >= len(events), got, at, batch)
    finally:
        source.close()
    positions = [r.position for r in got]
    assert len(positions) == len(set(positions)) == len(events), "every record once"
    for p in range(PARTS):
        offsets = [pos.offset for pos in positions if pos.partition == p]
        assert offsets == list(range(len(offsets))), f"partition {p} in order, from its start, without a gap"


def test_a_definition_written_after_its_units_is_applied_early(
        support: ModuleType, open_store: Callable[[], ProjectionStore], kafka_bootstrap: str, unique_topic: str) -> None:
    provision_topic(kafka_bootstrap, unique_topic, PARTS)
    election = _election_in_last_partition()
    events = support.election_log(80, election_id=election, definition_last=True)
    support.produce(kafka_bootstrap, unique_topic, events, PARTS)
    log = KafkaLog(kafka_bootstrap, unique_topic, partitions=PARTS, session_timeout_ms=SESSION_MS)
    offset = max(r.position.offset for r in log.read() if r.key == election_key(election))
    log.close()
    store = open_store()
    sid = store.ensure_serving("tally", source="kafka").set_id
    read_then: list[int] = []

    def committed(changes: Any, positions: dict[int, int]) -> None:
        if changes.elections:
            read_then.append(sum(positions.values()))

    batch = 10
    source = KafkaGroupSource(KafkaLog(kafka_bootstrap, unique_topic, partitions=PARTS, session_timeout_ms=SESSION_MS),
                              f"g-{unique_topic}", max_poll_records=batch)
    runner = ProjectionRunner(store, sid, source, batch_size=batch, poll_timeout=0.1, on_commit=committed)
    progress = runner.run(until_caught_up=True)
    assert progress.applied == len(events) and progress.duplicates == 0 and progress.skipped == 0
    # The first batch, then the definition's partition up to the definition (not every partition before it).
    assert read_then and read_then[0] <= batch + offset + 1 < len(events) // 2
    p = Projection()
    p.apply_all(events)
    ctx = election_context(p.elections[election], election)
    assert {u: t[2] for u, t in support.snapshot(store, sid)["tallies"].items()} == {
        u: compute_unit_tally(s, ctx).dumps() for u, s in p.units.items()}


def test_units_of_an_election_never_defined_send_the_runner_there_once(
        support: ModuleType, open_store: Callable[[], ProjectionStore], kafka_bootstrap: str, unique_topic: str) -> None:
    """An election whose definition never comes (a cut that leaves it out, units filed under a mistyped id):
    its partition is read ahead up to where it stood when asked, then the runner reads as before."""
    provision_topic(kafka_bootstrap, unique_topic, PARTS)
    election = _election_in_last_partition()
    events = [e for e in support.election_log(80, election_id=election) if e.envelope.unit_id]
    support.produce(kafka_bootstrap, unique_topic, events, PARTS)
    store = open_store()
    sid = store.ensure_serving("tally", source="kafka").set_id
    source = KafkaGroupSource(KafkaLog(kafka_bootstrap, unique_topic, partitions=PARTS, session_timeout_ms=SESSION_MS),
                              f"g-{unique_topic}", max_poll_records=10)
    progress = ProjectionRunner(store, sid, source, batch_size=10, poll_timeout=0.1).run(until_caught_up=True)
    assert progress.applied == len(events) and progress.duplicates == 0 and progress.skipped == 0
    assert source._first._done == {PARTS - 1} and not source._first.asked
    with store.reader(sid) as r:
        assert r.event_count() == len(events)
