"""A batch folded before the lock (``projections.early_fold``) is kept only if its base held: another
runner committing between that fold and the lock (the same records, or a repeat of one of its events at
another offset) makes the batch fold again under the lock, so nothing is counted twice. SQLite,
PostgreSQL and the in-memory store."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pytest

from ledger.codec import default_codec
from ledger.log.port import Position, StoredRecord
from ledger.log.sqlite import SqliteLog
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore

Open = Callable[[], ProjectionStore]


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _Interleaved:
    """A store whose first batch transaction lets ``meanwhile`` run before it takes the lock: another
    runner commits after this one folded its batch on a snapshot."""

    def __init__(self, store: ProjectionStore, meanwhile: Callable[[], None]) -> None:
        self._store = store
        self._meanwhile: Callable[[], None] | None = meanwhile
        self.transactions = 0

    @contextmanager
    def transaction(self, set_id: int, staged: Any = None) -> Iterator[Any]:
        self.transactions += 1
        meanwhile, self._meanwhile = self._meanwhile, None
        if meanwhile is not None:
            meanwhile()
        with self._store.transaction(set_id, staged) as tx:
            yield tx

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def _setup(support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog]) -> tuple[SqliteLog, list[StoredRecord], int]:
    """The log, and a set that holds its election definition already (a batch that changes an election
    is always folded under the lock): the records returned are the units' events."""
    events = support.election_log(30, corrections=2, rejections=1, seed=41)
    log = embedded_log(events, partitions=4)
    sid = open_store().ensure_serving("tally", source="test").set_id
    definition = next(r for r in log.read() if r.value == default_codec().encode(events[0]))
    _runner(open_store(), sid, log, {definition.position.partition}).apply([definition])
    records = [r for r in log.read() if r.position != definition.position]
    return log, records, sid


def _runner(store: Any, sid: int, log: SqliteLog, partitions: set[int]) -> ProjectionRunner:
    """A runner that owns ``partitions`` (read from the positions stored now), fed by ``apply``."""
    runner = ProjectionRunner(store, sid, EmbeddedSource(SqliteLog(log.path)), batch_size=10_000, early_fold=True)
    runner.assigned(partitions)
    return runner


def test_another_runner_committing_the_same_records_meanwhile(
    support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog]
) -> None:
    log, records, sid = _setup(support, open_store, embedded_log)
    other = _runner(open_store(), sid, log, {0})
    part0 = [r for r in records if r.position.partition == 0]
    store = _Interleaved(open_store(), lambda: other.apply(part0[: len(part0) // 2]))
    runner = _runner(store, sid, log, {0, 1, 2, 3})
    runner.apply(records)
    assert store.transactions == 2, "the early fold's base moved: rolled back and folded again under the lock"
    assert runner.progress.skipped == len(part0) // 2
    assert runner.progress.applied == len(records) - len(part0) // 2
    _same_as_one_runner(support, open_store(), sid, records, open_store, log)


def test_a_repeat_applied_elsewhere_meanwhile_is_not_counted_twice(
    support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog]
) -> None:
    log, records, sid = _setup(support, open_store, embedded_log)
    batch = [r for r in records if r.position.partition != 3]
    last3 = max(r.position.offset for r in records if r.position.partition == 3)
    repeat = StoredRecord(Position(3, last3 + 1), batch[-1].key, batch[-1].value, batch[-1].timestamp_ms, batch[-1].headers)
    other = _runner(open_store(), sid, log, {3})
    store = _Interleaved(open_store(), lambda: other.apply([r for r in records if r.position.partition == 3] + [repeat]))
    runner = _runner(store, sid, log, {0, 1, 2, 3})
    runner.apply(batch)
    assert store.transactions == 2, "the index held one of the batch's ids: folded again under the lock"
    assert runner.progress.duplicates == 1 and runner.progress.applied == len(batch) - 1
    # The repeated event reached its unit first (from partition 3), so that unit's fold order is not the
    # log's: it is compared by how many events it counts, every other unit in full.
    _same_as_one_runner(support, open_store(), sid, records, open_store, log, loose=("e1", repeat.key))


def test_a_batch_with_nothing_in_between_commits_once(
    support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog]
) -> None:
    log, records, sid = _setup(support, open_store, embedded_log)
    store = _Interleaved(open_store(), lambda: None)
    runner = _runner(store, sid, log, {0, 1, 2, 3})
    half = len(records) // 2
    runner.apply(records[:half])
    runner.apply(records[half:])
    assert store.transactions == 2 and runner.progress.applied == len(records)
    _same_as_one_runner(support, open_store(), sid, records, open_store, log)


def _same_as_one_runner(support: ModuleType, store: ProjectionStore, sid: int, records: list[StoredRecord],
                        open_store: Open, log: SqliteLog, loose: tuple[str, str] | None = None) -> None:
    """The set equals one runner's fold of the same log into a set of its own."""
    ref = store.create_set("reference", source="test").set_id
    ProjectionRunner(open_store(), ref, EmbeddedSource(SqliteLog(log.path)), batch_size=7).run(until_caught_up=True)
    got, want = support.snapshot(store, sid), support.snapshot(store, ref)
    assert got["events"] == want["events"] == len({r.value for r in records}) + 1  # and the definition
    if loose is not None:
        events = [json.loads(side["units"].pop(loose))["events"] for side in (got, want)]
        assert events[0] == events[1], f"the repeated event's unit counts {events[0]} events, not {events[1]}"
        for side in (got, want):
            side["tallies"].pop(loose)
    assert (got["units"], got["tallies"], got["elections"]) == (want["units"], want["tallies"], want["elections"])


def test_only_a_source_that_shares_partitions_folds_before_the_lock(
    open_store: Open, embedded_log: Callable[..., SqliteLog]
) -> None:
    from projections.replay import CutSource
    from projections.asof import Cut
    from projections.kafka_source import KafkaGroupSource

    log = embedded_log([], partitions=2)
    store = open_store()
    sid = store.ensure_serving("tally", source="test").set_id
    alone = EmbeddedSource(SqliteLog(log.path))
    assert not ProjectionRunner(store, sid, alone).early_fold
    assert ProjectionRunner(store, sid, alone, early_fold=True).early_fold
    assert KafkaGroupSource.shares_partitions and not CutSource(alone, Cut()).shares_partitions


@pytest.mark.parametrize("definition_last", [False, True])
def test_folding_before_the_lock_or_not_builds_the_same_set(
    support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog], definition_last: bool
) -> None:
    events = support.election_log(25, corrections=2, rejections=1, seed=5, definition_last=definition_last)
    log = embedded_log(events, partitions=4)
    store = open_store()
    sets = {}
    for early in (False, True):
        for batch in (7, 10_000):
            sid = store.create_set(f"s-{early}-{batch}", source="test").set_id
            ProjectionRunner(open_store(), sid, EmbeddedSource(SqliteLog(log.path)), batch_size=batch,
                             early_fold=early).run(until_caught_up=True)
            sets[(early, batch)] = support.snapshot(store, sid)
    first = next(iter(sets.values()))
    assert first["events"] == len(events)
    assert all(snap == first for snap in sets.values())


def test_an_early_fold_stops_at_the_chunk_that_holds_an_election_event(
    support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog]
) -> None:
    from projections.batch_fold import BatchFolder
    from projections.early_fold import fold_early

    units_then_definition = support.election_log(40, seed=9, definition_last=True)
    events = units_then_definition[:-1]
    events.insert(len(events) // 2, units_then_definition[-1])  # the definition amid the units' events
    log = embedded_log(events, partitions=1)
    records = list(log.read())
    store = open_store()
    sid = store.ensure_serving("tally", source="test").set_id
    folder = BatchFolder(default_codec(), chunk=10)
    decoded: list[int] = []
    decode = folder.decode_chunk
    folder.decode_chunk = lambda recs, *a: decoded.append(len(recs)) or decode(recs, *a)  # type: ignore[method-assign]
    at = next(i for i, r in enumerate(records) if r.value == default_codec().encode(units_then_definition[-1]))
    assert 20 < at < len(records) - 20
    assert fold_early(store, sid, folder, {0: records}, {0: 0}) is None
    assert len(decoded) == at // 10 + 1, "no chunk after the definition's was decoded"
    decoded.clear()
    assert fold_early(store, sid, folder, {0: records[:at]}, {0: 0}) is not None  # without it: folded early
