"""The runner on the embedded log, against every store (SQLite, PostgreSQL, in memory): exactly once,
dedupe, restarts, order."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

import pytest

from ledger.codec import default_codec
from ledger.journal import Journal
from ledger.log.port import LogLostError, PendingRecord
from ledger.log.sqlite import SqliteLog
from projections.reducers import Projection
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore
from projections.tally import compute_unit_tally, election_context

Open = Callable[[], ProjectionStore]


@pytest.fixture(params=["sqlite", "postgres", "memory"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _run(store: ProjectionStore, set_id: int, log: SqliteLog, *, batch_size: int = 50,
         stop: Callable[[], bool] | None = None, until_caught_up: bool = True,
         keep: list[ProjectionRunner] | None = None) -> ProjectionRunner:
    runner = ProjectionRunner(store, set_id, EmbeddedSource(SqliteLog(log.path)), batch_size=batch_size, poll_timeout=0.01)
    if keep is not None:
        keep.append(runner)
    runner.run(until_caught_up=until_caught_up, stop=stop)
    return runner


def _new_set(store: ProjectionStore) -> int:
    return store.ensure_serving("tally", source="test").set_id


def test_tallies_equal_an_in_memory_fold(support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog]) -> None:
    events = support.election_log(60, corrections=2, rejections=1)
    log = embedded_log(events)
    store = open_store()
    sid = _new_set(store)
    runner = _run(store, sid, log)
    assert runner.progress.applied == len(events) and runner.progress.caught_up
    p = Projection()
    p.apply_all(events)
    ctx = election_context(p.elections["e1"], "e1")
    expected = {u: compute_unit_tally(s, ctx).dumps() for u, s in p.units.items()}
    got = support.snapshot(store, sid)
    assert {u: t[2] for u, t in got["tallies"].items()} == expected
    assert got["units"] == {u: s.dumps() for u, s in p.units.items()}
    assert got["events"] == len(events)
    with store.reader(sid) as r:
        assert {p: row.next_offset for p, row in r.positions().items()} == {p: m for p, m in log.high_watermarks().items() if m}


def test_stop_midway_and_resume_equals_a_clean_run(support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog]) -> None:
    events = support.election_log(80, corrections=2, rejections=1)
    log = embedded_log(events)
    clean_store = open_store()
    clean = clean_store.create_set("clean", source="test").set_id
    _run(clean_store, clean, log, batch_size=1000)

    store = open_store()
    sid = _new_set(store)
    holder: list[ProjectionRunner] = []
    first = _run(store, sid, log, batch_size=37, stop=lambda: holder[0].progress.batches >= 4, keep=holder)
    assert 0 < first.progress.applied < len(events) and first.progress.stopped == "signal"
    again = open_store()  # a new process, as far as the store can tell
    second = _run(again, sid, log, batch_size=37)
    assert first.progress.applied + second.progress.applied == len(events), "nothing applied twice, nothing skipped"
    assert support.snapshot(again, sid) == support.snapshot(clean_store, clean)


@pytest.mark.parametrize("chunk", [3, 1000], ids=["repeats-across-chunks", "repeats-within-a-chunk"])
def test_duplicates_within_one_batch_are_applied_once(
    support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog], monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    """A batch is decoded and indexed chunk by chunk; a repeated event id is dropped whether its
    first copy sits in an earlier chunk (the index reports it) or in the same one."""
    import projections.runner as runner_module

    monkeypatch.setattr(runner_module, "_CHUNK", chunk)
    events = support.election_log(20, corrections=1)
    log = embedded_log(events)
    codec = default_codec()
    retries = [events[3], events[11], events[3]]  # one of them retried twice
    log.append_batch([PendingRecord(e.key, f"retry-{i}", codec.encode(e)) for i, e in enumerate(retries)])
    store = open_store()
    sid = _new_set(store)
    runner = _run(store, sid, log, batch_size=1000)
    assert runner.progress.batches == 1, "everything in one batch"
    assert (runner.progress.applied, runner.progress.duplicates) == (len(events), 3)
    expected = Projection()
    for e in events:
        expected.apply(e)
    with store.reader(sid) as r:
        assert r.event_count() == len(events)
        states = {key: row.state for key, row in r.unit_states().items()}
    assert states == {uid: st.dumps() for uid, st in expected.units.items()}


def test_duplicate_event_ids_at_other_positions_are_dropped(
    support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog], tmp_path: Any
) -> None:
    events = support.election_log(20)
    log = embedded_log(events)
    codec = default_codec()
    # A producer retry that landed twice: same event, another record (the log's own dedupe keys on
    # the record's event id, so give the copies fresh record ids).
    retries = [events[5], events[17], events[0]]
    log.append_batch([PendingRecord(e.key, f"retry-{i}", codec.encode(e)) for i, e in enumerate(retries)])
    store = open_store()
    sid = _new_set(store)
    runner = _run(store, sid, log, batch_size=7)
    assert runner.progress.duplicates == 3 and runner.progress.applied == len(events)
    clean_store = open_store()
    clean = clean_store.create_set("clean", source="test").set_id
    clean_log = SqliteLog(tmp_path / "clean.sqlite3", partitions=8)
    Journal(clean_log).append_batch(events)
    _run(clean_store, clean, clean_log, batch_size=500)
    assert support.snapshot(store, sid)["tallies"] == support.snapshot(clean_store, clean)["tallies"]
    with store.reader(sid) as r:
        assert r.event_count() == len(events)
        assert sum(row.next_offset for row in r.positions().values()) == len(events) + 3


def test_definition_after_the_units_gives_the_same_tallies(support: ModuleType, open_store: Open, tmp_path: Any) -> None:
    first = SqliteLog(tmp_path / "a.sqlite3", partitions=4)
    last = SqliteLog(tmp_path / "b.sqlite3", partitions=4)
    Journal(first).append_batch(support.election_log(40))
    Journal(last).append_batch(support.election_log(40, definition_last=True))
    store = open_store()
    a = store.create_set("a", source="a").set_id
    b = store.create_set("b", source="b").set_id
    _run(store, a, first, batch_size=9)
    _run(store, b, last, batch_size=9)
    ta, tb = support.snapshot(store, a), support.snapshot(store, b)
    assert ta["tallies"] == tb["tallies"] and ta["units"] == tb["units"]
    assert all('"cds_source":"computed"' in t[2] for t in tb["tallies"].values())


def test_units_of_an_undefined_election_send_the_runner_to_its_definition(
        support: ModuleType, open_store: Open, tmp_path: Any) -> None:
    """``ProjectionRunner._ask_definitions``: once a batch folded units of an election it has no
    definition of, the definition's partition is read before the others, so the definition's batch
    tallies again only what was read so far. Read in append order (the definition last) it would
    come after every unit."""
    from ledger.event_values import election_key
    from ledger.log.partitioning import partition_for

    events = support.election_log(40, definition_last=True)
    log = SqliteLog(tmp_path / "last.sqlite3", partitions=4)
    Journal(log).append_batch(events)
    defined = [r for r in log.read({p: 0 for p in range(4)}) if r.key == election_key("e1")]
    assert len(defined) == 1 and defined[0].position.partition == partition_for(election_key("e1"), 4)
    store = open_store()
    sid = _new_set(store)
    read_then: list[int] = []

    def committed(changes: Any, positions: dict[int, int]) -> None:
        if changes.elections:
            read_then.append(sum(positions.values()))

    batch = 9
    runner = ProjectionRunner(store, sid, EmbeddedSource(SqliteLog(log.path)), batch_size=batch, poll_timeout=0.01,
                              on_commit=committed)
    progress = runner.run(until_caught_up=True)
    assert progress.applied == len(events) and progress.duplicates == 0 and progress.skipped == 0
    # The first batch (in append order), then the definition's partition up to the definition.
    assert read_then and read_then[0] <= batch + defined[0].position.offset + 1 < len(events)
    p = Projection()
    p.apply_all(events)
    ctx = election_context(p.elections["e1"], "e1")
    assert {u: t[2] for u, t in support.snapshot(store, sid)["tallies"].items()} == {
        u: compute_unit_tally(s, ctx).dumps() for u, s in p.units.items()}


def test_two_runners_on_one_set_equal_one(support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog]) -> None:
    """The embedded log has no groups: two runners both read everything. The store lock and the
    position check make the second one skip what the first applied (and vice versa)."""
    events = support.election_log(60, corrections=2)
    log = embedded_log(events)
    one_store = open_store()
    one = one_store.create_set("one", source="t").set_id
    _run(one_store, one, log, batch_size=1000)
    s1, s2 = open_store(), open_store()
    sid = _new_set(s1)
    runners = [ProjectionRunner(s, sid, EmbeddedSource(SqliteLog(log.path)), batch_size=13, poll_timeout=0.01) for s in (s1, s2)]
    threads = [threading.Thread(target=r.run, kwargs={"until_caught_up": True}) for r in runners]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sum(r.progress.applied for r in runners) == len(events)
    assert support.snapshot(s1, sid) == support.snapshot(one_store, one)


class _LeftWithoutPartitions(EmbeddedSource):
    """Assigns every partition, then takes them all away again: what a Kafka group does to its
    members when the broker under it restarts, before (if ever) it assigns them anew."""

    def start(self, listener: Any) -> None:
        super().start(listener)
        parts = set(self._next)
        self._next = {}
        listener.revoked(parts)


def test_a_runner_left_without_partitions_still_reports_a_lost_log(support: ModuleType, open_store: Open, tmp_path: Any) -> None:
    path = tmp_path / "log.sqlite3"
    Journal(SqliteLog(path, partitions=4)).append_batch(support.election_log(10))
    store = open_store()
    sid = _new_set(store)
    _run(store, sid, SqliteLog(path))
    path.unlink()
    for extra in ("-wal", "-shm"):
        (tmp_path / f"log.sqlite3{extra}").unlink(missing_ok=True)
    Journal(SqliteLog(path, partitions=4)).append_batch(support.election_log(2))
    runner = ProjectionRunner(store, sid, _LeftWithoutPartitions(SqliteLog(path)), poll_timeout=0.01)
    with pytest.raises(LogLostError, match="log lost or rewound"):
        runner.run(until_caught_up=True)


def test_a_rewound_log_is_reported_not_waited_on(support: ModuleType, open_store: Open, tmp_path: Any) -> None:
    path = tmp_path / "log.sqlite3"
    Journal(SqliteLog(path, partitions=4)).append_batch(support.election_log(10))
    store = open_store()
    sid = _new_set(store)
    _run(store, sid, SqliteLog(path))
    path.unlink()
    for extra in ("-wal", "-shm"):
        (tmp_path / f"log.sqlite3{extra}").unlink(missing_ok=True)
    Journal(SqliteLog(path, partitions=4)).append_batch(support.election_log(2))
    with pytest.raises(LogLostError, match="log lost or rewound"):
        _run(store, sid, SqliteLog(path))


def test_a_log_rewound_and_written_again_past_the_projection_is_reported(support: ModuleType, open_store: Open, tmp_path: Any) -> None:
    """Written again past every stored position, the log's high watermarks say nothing: the records at
    the positions the projection passed are other events, which must not be skipped without a word."""
    from projections.log_continuity import LogRewoundError

    path = tmp_path / "log.sqlite3"
    Journal(SqliteLog(path, partitions=4)).append_batch(support.election_log(10))
    store = open_store()
    sid = _new_set(store)
    _run(store, sid, SqliteLog(path))
    with store.reader(sid) as r:
        before = {p: row.next_offset for p, row in r.positions().items()}
    path.unlink()
    for extra in ("-wal", "-shm"):
        (tmp_path / f"log.sqlite3{extra}").unlink(missing_ok=True)
    Journal(SqliteLog(path, partitions=4)).append_batch(support.election_log(40, election_id="e2"))
    refilled = SqliteLog(path)
    assert all(refilled.high_watermarks()[p] >= n for p, n in before.items())  # what the old check looked at
    refilled.close()
    with pytest.raises(LogRewoundError, match="not the event this projection applied there"):
        _run(store, sid, SqliteLog(path))
    with store.reader(sid) as r:
        assert {p: row.next_offset for p, row in r.positions().items()} == before  # nothing of the new log applied


def _projected_then_restored(support: ModuleType, open_store: Open, tmp_path: Any) -> tuple[list[Any], Any, ProjectionStore, int]:
    """A 12-unit election's log projected up to its 30th event, then replaced by a copy taken after its
    fifth: (the events, the log's path, the store, the set)."""
    import shutil

    events = support.election_log(12)
    path = tmp_path / "log.sqlite3"
    first = SqliteLog(path, partitions=4)
    Journal(first).append_batch(events[:5])
    first.close()  # the copy is of the file alone: nothing left in its WAL
    shutil.copy(path, tmp_path / "older.sqlite3")
    Journal(SqliteLog(path)).append_batch(events[5:30])
    store = open_store()
    sid = _new_set(store)
    _run(store, sid, SqliteLog(path))
    for extra in ("", "-wal", "-shm"):
        (tmp_path / f"log.sqlite3{extra}").unlink(missing_ok=True)
    shutil.copy(tmp_path / "older.sqlite3", path)
    return events, path, store, sid


def test_a_log_restored_and_given_back_its_own_events_goes_on(support: ModuleType, open_store: Open, tmp_path: Any) -> None:
    """An older copy restored and the lost events appended again (same ids, same positions): nothing
    was lost, so the runner goes on, and the tallies are those of the whole log."""
    events, path, store, sid = _projected_then_restored(support, open_store, tmp_path)
    Journal(SqliteLog(path)).append_batch(events[5:])
    runner = _run(store, sid, SqliteLog(path))
    assert runner.progress.applied == len(events) - 30
    p = Projection()
    p.apply_all(events)
    ctx = election_context(p.elections["e1"], "e1")
    assert {u: t[2] for u, t in support.snapshot(store, sid)["tallies"].items()} == {
        u: compute_unit_tally(s, ctx).dumps() for u, s in p.units.items()}


def test_a_log_restored_then_given_new_events_before_its_lost_ones_is_reported(support: ModuleType, open_store: Open,
                                                                                tmp_path: Any) -> None:
    """The lost events appended again, but after new ones (an intake took a report meanwhile): the ids
    at the stored positions may be ones the projection applied, just not there, and the new events
    sit where the projection has passed. Not skipped: reported as a rewound log."""
    from projections.log_continuity import LogRewoundError

    events, path, store, sid = _projected_then_restored(support, open_store, tmp_path)
    Journal(SqliteLog(path)).append_batch(support.election_log(3, election_id="e2"))
    Journal(SqliteLog(path)).append_batch(events[5:])
    with pytest.raises(LogRewoundError):
        _run(store, sid, SqliteLog(path))


def test_partitions_given_again_at_the_same_positions_are_checked_again(support: ModuleType, open_store: Open,
                                                                        tmp_path: Any) -> None:
    """A group rejoin (after a broker restart) hands a running runner its partitions again at the
    positions it already checked; the log may have been refilled meanwhile, so they are checked again."""
    from projections.log_continuity import LogRewoundError

    path = tmp_path / "log.sqlite3"
    Journal(SqliteLog(path, partitions=4)).append_batch(support.election_log(10))
    store = open_store()
    sid = _new_set(store)
    _run(store, sid, SqliteLog(path))
    runner = _run(store, sid, SqliteLog(path))  # restarted: its stored positions checked, nothing new
    for extra in ("", "-wal", "-shm"):
        (tmp_path / f"log.sqlite3{extra}").unlink(missing_ok=True)
    Journal(SqliteLog(path, partitions=4)).append_batch(support.election_log(40, election_id="e2"))
    runner.source = EmbeddedSource(SqliteLog(path))
    runner.revoked(set(range(4)))
    runner.assigned(set(range(4)))
    with pytest.raises(LogRewoundError):
        runner._check_marks()  # noqa: SLF001 -- what the loop runs before its next batch


def test_a_redefinition_recomputes_every_unit(support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog]) -> None:
    from dataclasses import replace
    from datetime import timedelta
    from fractions import Fraction

    events = support.election_log(30)
    defn = events[0].payload
    doubled = replace(defn, counties=tuple(replace(c, sde_ratio=c.sde_ratio * 2) for c in defn.counties))
    redefine = support.ev(doubled, event_id="redefine", at=support.T0 + timedelta(days=9))
    log = embedded_log([*events, redefine])
    store = open_store()
    sid = _new_set(store)
    _run(store, sid, log, batch_size=1000)
    p = Projection()
    p.apply_all([*events, redefine])
    ctx = election_context(p.elections["e1"], "e1")
    got = support.tallies_json(store, sid)
    assert got == {u: json.loads(compute_unit_tally(s, ctx).dumps()) for u, s in p.units.items()}
    precinct = next(t for t in got.values() if t["satellite_group"] is None and t["delegates"])
    ratio = next(c.sde_ratio for c in doubled.counties if c.county_id == precinct["county_id"])
    assert Fraction(precinct["sde_weight"]) == precinct["delegates"] * ratio


class _Half(EmbeddedSource):
    """Owns partitions 0 and 1 of four, as a member of a consumer group does; someone else holds the rest."""

    shares_partitions = True
    OWN = frozenset({0, 1})

    def start(self, listener: Any) -> None:
        super().start(listener)
        listener.revoked(set(self._next) - self.OWN)

    def assigned(self) -> set[int]:
        return set(self.OWN)

    def poll(self, max_records: int, timeout: float) -> list[Any]:
        return [r for r in super().poll(max_records, timeout) if r.position.partition in self.OWN]


class _ReadsFailing:
    """The store, with ``fail`` reads refused as by a database restarting, after the first ``skip``."""

    def __init__(self, store: ProjectionStore, *, skip: int, fail: int) -> None:
        self._store, self._skip, self.fail = store, skip, fail

    def reader(self, set_id: int) -> Any:
        from projections.stores.port import StoreUnavailable

        if self._skip > 0:
            self._skip -= 1
        elif self.fail > 0:
            self.fail -= 1
            raise StoreUnavailable("the projection store database went away mid-transaction: restarting")
        return self._store.reader(set_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def test_until_caught_up_waits_for_the_partitions_it_does_not_own_through_a_store_outage(
    support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog]
) -> None:
    events = support.election_log(40, corrections=1)
    log = embedded_log(events, partitions=4)
    sid = _new_set(open_store())
    flaky = _ReadsFailing(open_store(), skip=1, fail=3)  # the start's read passes, then the wait's reads fail
    runner = ProjectionRunner(flaky, sid, _Half(SqliteLog(log.path)), poll_timeout=0.01, early_fold=False,  # type: ignore[arg-type]
                              others_timeout=0, store_retry_seconds=60)
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=lambda: outcome.update(progress=runner.run(until_caught_up=True)), daemon=True)
    thread.start()
    support.wait_for(lambda: flaky.fail == 0 and runner.progress.others_behind, 60, "the store back and the runner waiting")
    assert thread.is_alive() and set(runner.progress.others_behind) <= {2, 3} and runner.progress.store_outages == 1
    _run(open_store(), sid, log)  # another runner applies the rest (and skips what is applied)
    thread.join(60)
    assert not thread.is_alive() and outcome["progress"].caught_up and not outcome["progress"].others_behind
    with open_store().reader(sid) as r:
        assert r.event_count() == len(events)


def test_a_hand_over_during_a_store_outage_waits_for_the_store(
    support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog]
) -> None:
    """A source hands partitions over (``assigned``) from inside a poll, and the runner reads where to
    start from the store. A database restarting just then ended the runner (the read was outside the
    batch's retries); it now waits, as a batch does, and goes on."""
    events = support.election_log(30)
    log = embedded_log(events)
    sid = _new_set(open_store())
    flaky = _ReadsFailing(open_store(), skip=0, fail=3)
    waited: list[float] = []
    runner = ProjectionRunner(flaky, sid, EmbeddedSource(SqliteLog(log.path)), poll_timeout=0.01,  # type: ignore[arg-type]
                              store_retry_seconds=60, sleep=waited.append)
    progress = runner.run(until_caught_up=True)
    assert flaky.fail == 0 and progress.caught_up and progress.store_outages == 1 and len(waited) == 3
    with open_store().reader(sid) as r:
        assert r.event_count() == len(events)


class _OldMarks(EmbeddedSource):
    """High watermarks as a Kafka fetch answers them: as of the last fetch, which may be older than
    positions another runner stored since (here: as old as the log's start, for what this runner has
    not read itself)."""

    def __init__(self, log: SqliteLog) -> None:
        super().__init__(log)
        self._read: dict[int, int] = {}

    def poll(self, max_records: int, timeout: float) -> list[Any]:
        records = super().poll(max_records, timeout)
        for rec in records:
            self._read[rec.position.partition] = rec.position.offset + 1
        return records

    def high_watermarks(self) -> dict[int, int]:
        return {p: self._read.get(p, 0) for p in range(self.log.partitions)}


def test_marks_older_than_what_another_runner_applied_are_no_lost_log(
    support: ModuleType, open_store: Open, embedded_log: Callable[..., SqliteLog]
) -> None:
    """Another runner applied the log; this one's source still has marks from before. Held against the
    stored positions they read as a log that lost records (exit 3, "rebuild the projection"): the log is
    asked again before that is said. A log that did lose records still says so (the tests above)."""
    events = support.election_log(30)
    log = embedded_log(events)
    store = open_store()
    sid = _new_set(store)
    _run(store, sid, log)  # the other runner
    runner = ProjectionRunner(open_store(), sid, _OldMarks(SqliteLog(log.path)), poll_timeout=0.01)
    progress = runner.run(until_caught_up=True)
    assert progress.caught_up and progress.high_watermarks == SqliteLog(log.path).high_watermarks()
    with open_store().reader(sid) as r:
        assert r.event_count() == len(events)
