"""As-of tallies from the projection's unit history (``projections.asof_store``) equal the log's replay
(``projections.asof.tally_as_of``, the reference) on random histories: two elections sharing unit ids,
corrections, refusals, tosses, repeated records, certification; projected in random batch sizes (so
batches straddle the cuts); cut at random times and positions. SQLite and PostgreSQL on the embedded
log, PostgreSQL on Kafka; where the history cannot answer, the view says so and replays."""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ledger.events import ResultsCertified, TieBroken, TieMethod
from ledger.codec import default_codec
from ledger.journal import Journal
from ledger.log.port import EventLog, PendingRecord
from ledger.log.sqlite import SqliteLog
from projections.asof import AsOfTally, Cut, tally_as_of
from projections.asof_store import history_tally
from projections.queries import view_as_of
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore, SetInfo

Open = Callable[[], ProjectionStore]


def _history(support: ModuleType, rnd: random.Random) -> list[Any]:
    """Two elections' events interleaved (each unit's in its order), a toss, repeats, a certification."""
    lists = [support.election_log(rnd.randint(2, 7), election_id=e, corrections=rnd.randint(0, 2),
                                  rejections=rnd.randint(0, 1), seed=rnd.randint(0, 999)) for e in ("e1", "e2")]
    events: list[Any] = []
    while any(lists):
        src = rnd.choice([q for q in lists if q])
        events.append(src.pop(0))
    late = max(e.recorded_at for e in events)
    toss_unit = next(e.unit_id for e in events if e.unit_id)
    events.append(support.ev(TieBroken(contenders=("Alvarez", "Baker"), seats=1, winners=("Baker",), method=TieMethod.COIN,
                                       caller="chair"), unit_id=toss_unit, at=late + timedelta(minutes=1)))
    events.append(support.ev(ResultsCertified(authority="party"), election_id="e2", at=late + timedelta(minutes=2)))
    return events


def _append(log: EventLog, events: list[Any], rnd: random.Random) -> None:
    """The events, then a few of them again as records of their own (a producer's retry landing twice)."""
    Journal(log).append_batch(events)
    codec = default_codec()
    again = rnd.sample(events, rnd.randint(1, 3))
    log.append_batch([PendingRecord(e.key, f"retry-{i}-{e.event_id}", codec.encode(e)) for i, e in enumerate(again)])


def _project(store: ProjectionStore, log: SqliteLog, batch: int) -> SetInfo:
    info = store.create_set(f"h{uuid.uuid4().hex[:8]}", source=f"log:{log.log_id}")
    ProjectionRunner(store, info.set_id, EmbeddedSource(SqliteLog(log.path)), batch_size=batch, poll_timeout=0.01).run(until_caught_up=True)
    return info


def _same(got: AsOfTally | str, want: AsOfTally, *, positions: bool) -> None:
    assert not isinstance(got, str), got
    assert got.context.election_id == want.context.election_id
    assert {u: t.dumps() for u, t in got.units.items()} == {u: t.dumps() for u, t in want.units.items()}
    assert {e: s.dumps() for e, s in got.state.elections.items()} == {e: s.dumps() for e, s in want.state.elections.items()}
    assert {k: s.dumps() for k, s in got.state.units.items()} == {k: s.dumps() for k, s in want.state.units.items()}
    if positions:
        assert got.positions == want.positions


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 100_000), batch=st.integers(1, 40))
def test_history_answers_as_the_replay(support: ModuleType, open_store: Open, tmp_path: Path, seed: int, batch: int) -> None:
    rnd = random.Random(seed)
    log = SqliteLog(tmp_path / f"log-{uuid.uuid4().hex}.sqlite3", partitions=4)
    events = _history(support, rnd)
    _append(log, events, rnd)
    store = open_store()
    try:
        info = _project(store, log, batch)
        _compare_at_random_cuts(store, info, log, events, rnd, 6)
    finally:
        store.close()


def _compare_at_random_cuts(store: ProjectionStore, info: SetInfo, log: EventLog, events: list[Any], rnd: random.Random,
                            rounds: int) -> None:
    marks = log.high_watermarks()
    times = sorted({e.recorded_at for e in events})
    for _ in range(rounds):
        election = rnd.choice(["e1", "e2"])
        at = rnd.choice(times) + rnd.choice([timedelta(0), timedelta(seconds=-1), timedelta(seconds=1)])
        cuts = [(Cut(at=at), False), (Cut(ends={p: rnd.randint(0, m) for p, m in marks.items()}), True),
                (Cut(ends={0: rnd.randint(0, marks.get(0, 0))}, rest=rnd.choice([0, None])), True)]
        for cut, exact_positions in cuts:
            try:
                want = tally_as_of(log, cut, election_id=election)
            except Exception as exc:  # noqa: BLE001 (nothing of that election inside the cut): both refuse
                try:
                    history_tally(store, info, log, cut, election_id=election)
                except Exception as again:  # noqa: BLE001
                    assert type(again) is type(exc) and str(again) == str(exc)
                    continue
                raise AssertionError(f"the history answered where the replay refused: {exc}") from None
            _same(history_tally(store, info, log, cut, election_id=election), want, positions=exact_positions)


def test_history_answers_as_the_replay_on_kafka_and_postgres(support: ModuleType, kafka_bootstrap: str, unique_topic: str,
                                                             pg_dsn: str) -> None:
    from ledger.log.kafka import KafkaLog, provision_topic
    from projections.kafka_source import KafkaGroupSource
    from projections.stores.postgres import PostgresStore

    rnd = random.Random(2020)
    provision_topic(kafka_bootstrap, unique_topic, 4)
    events = _history(support, rnd)
    log = KafkaLog(kafka_bootstrap, unique_topic, partitions=4, session_timeout_ms=2000)
    _append(log, events, rnd)
    store = PostgresStore(pg_dsn)
    try:
        info = store.create_set(f"h{uuid.uuid4().hex[:8]}", source=f"log:{log.log_id}")
        source = KafkaGroupSource(KafkaLog(kafka_bootstrap, unique_topic, partitions=4, session_timeout_ms=2000),
                                  f"g-{unique_topic}", max_poll_records=7)
        ProjectionRunner(store, info.set_id, source, batch_size=7, poll_timeout=0.1).run(until_caught_up=True)
        _compare_at_random_cuts(store, info, log, events, rnd, 8)
    finally:
        store.close()
        log.close()


def test_a_history_that_cannot_answer_says_so_and_replays(support: ModuleType, open_store: Open, tmp_path: Path) -> None:
    events = support.election_log(6, corrections=1)
    late = events[-1]
    events.append(support.ev(TieBroken(contenders=("Alvarez", "Baker"), seats=1, winners=("Baker",), method=TieMethod.COIN,
                                       caller="chair"), unit_id=late.unit_id, at=late.recorded_at - timedelta(days=3)))
    log = SqliteLog(tmp_path / "log.sqlite3", partitions=4)
    Journal(log).append_batch(events)  # no repeats here
    store = open_store()
    try:
        info = _project(store, log, 5)
        night = support.T0 + timedelta(hours=2)
        assert history_tally(store, info, log, Cut(at=night)) == "some unit's events were recorded out of order"
        view = view_as_of(store, info, night, log=log)
        assert "replayed from the log: some unit's events were recorded out of order" in view.set.name
        assert {u: t.dumps() for u, t in view.units.items()} == {
            u: t.dumps() for u, t in tally_as_of(SqliteLog(log.path), Cut(at=night)).units.items()}
        by_position = view_as_of(store, info, Cut(ends={p: m // 2 for p, m in log.high_watermarks().items()}), log=log)
        assert "from the projection's history" in by_position.set.name
        other = store.create_set("other", source="log:another")
        assert history_tally(store, other, log, Cut(at=night)) == "the projection was built from another log"
    finally:
        store.close()


def test_a_repeated_record_inside_a_straddled_batch_counts_once(support: ModuleType, open_store: Open, tmp_path: Path) -> None:
    events = support.election_log(3, corrections=1)
    log = SqliteLog(tmp_path / "log.sqlite3", partitions=4)
    Journal(log).append_batch(events)
    report = next(e for e in events if e.type == "ResultReported")
    log.append_batch([PendingRecord(report.key, f"retry-{report.event_id}", default_codec().encode(report))])
    toss = support.ev(TieBroken(contenders=("Alvarez", "Baker"), seats=1, winners=("Baker",), method=TieMethod.COIN,
                                caller="chair"), unit_id=report.unit_id, at=support.T0 + timedelta(days=5))
    last = Journal(log).append(toss)
    store = open_store()
    try:
        info = _project(store, log, 10_000)  # one batch: every unit's entry straddles a cut inside the log
        cut = Cut(ends={last.partition: last.offset}, rest=None)
        want = tally_as_of(log, cut)
        assert want.state.duplicates == 1
        _same(history_tally(store, info, log, cut), want, positions=True)
    finally:
        store.close()


def test_a_projection_behind_the_log_says_how_far_not_that_it_missed_the_cut(support: ModuleType, open_store: Open,
                                                                            tmp_path: Path) -> None:
    """One record the projection has not read yet, wherever it lies: the reason counts what is unread (it
    said the projection 'has not caught up with the cut', also of records recorded long after it)."""
    events = support.election_log(6, corrections=1)
    log = SqliteLog(tmp_path / "log.sqlite3", partitions=4)
    Journal(log).append_batch(events[:-1])
    store = open_store()
    try:
        info = _project(store, log, 5)
        Journal(log).append_batch(events[-1:])
        why = history_tally(store, info, log, Cut(at=support.T0 + timedelta(hours=2)))
        assert why == ("the projection has not read the log's last 1 record(s), which may have been recorded before the "
                       "cut (`caucus project` brings them in)")
        whole = history_tally(store, info, log, Cut(ends={}, rest=None))
        assert whole == "the projection has not read 1 record(s) inside the cut (`caucus project` brings them in)"
    finally:
        store.close()
        log.close()
