"""A runner waits out an event log that stops answering (a broker hung or cut off, a failover), as it
does a store outage, and goes on where it stood once the log answers again; past its bound it ends
with the log's error. The broker here is the session's real one, stopped with SIGSTOP: it keeps its
memory, so what comes back is the same log."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ledger.journal import Journal
from ledger.log.kafka import KafkaLog, provision_topic
from ledger.log.port import LogReplacedError, LogUnavailableError
from ledger.log.sqlite import SqliteLog
from projections.kafka_source import KafkaGroupSource
from projections.observe import RunnerObserver, progress_line
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore

PARTS = 4


@contextmanager
def _hung(broker: Any) -> Iterator[None]:
    pid = broker.pid
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)


def _runner(store: ProjectionStore, sid: int, bootstrap: str, topic: str, retry: float) -> ProjectionRunner:
    log = KafkaLog(bootstrap, topic, partitions=PARTS, timeout=2.0, session_timeout_ms=2000)
    source = KafkaGroupSource(log, f"g-{topic}", max_poll_records=50, quiet_check=0.5)
    return ProjectionRunner(store, sid, source, batch_size=50, poll_timeout=0.1, log_retry_seconds=retry)


def _start(runner: ProjectionRunner, stop: threading.Event, errors: list[BaseException]) -> threading.Thread:
    def run() -> None:
        try:
            runner.run(stop=stop.is_set)
        except BaseException as exc:  # noqa: BLE001 -- the test reads it
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _count(store: ProjectionStore, sid: int) -> int:
    with store.reader(sid) as r:
        return r.event_count()


def test_a_following_runner_waits_for_a_log_that_stops_answering_and_goes_on(
        support: ModuleType, open_store: Callable[[], ProjectionStore], broker: Any, unique_topic: str, tmp_path: Path) -> None:
    provision_topic(broker.bootstrap, unique_topic, PARTS)
    events = support.election_log(40, corrections=2)
    before, after = events[:70], events[70:]
    support.produce(broker.bootstrap, unique_topic, before, PARTS)
    store = open_store()
    sid = store.ensure_serving("tally", source="kafka").set_id
    runner = _runner(store, sid, broker.bootstrap, unique_topic, retry=120)
    observer = RunnerObserver().attach(runner)
    stop, errors = threading.Event(), []
    thread = _start(runner, stop, errors)
    try:
        support.wait_for(lambda: _count(store, sid) == len(before) or bool(errors), 60, "the first events applied")
        with _hung(broker):
            support.wait_for(lambda: bool(runner.progress.waiting_for_log) or bool(errors), 60,
                             "the runner to find the log out of reach")
            assert progress_line(runner.progress).startswith("waiting for the event log (")
            support.wait_for(lambda: observer.progress is not None and bool(observer.progress.waiting_for_log), 10,
                             "the observer to hear of it")
            ready, details = observer.ready()
            assert not ready and any(r.startswith("waiting for the event log: ") for r in details["reasons"]), details
            assert observer.registry.get_sample_value("caucus_runner_log_outages_total") == 1
        assert not errors, errors
        support.produce(broker.bootstrap, unique_topic, after, PARTS)
        support.wait_for(lambda: _count(store, sid) == len(events) or bool(errors), 120, "the rest applied")
        assert thread.is_alive() and not errors, errors
    finally:
        stop.set()
        thread.join(30)
    assert runner.progress.log_outages >= 1 and runner.progress.waiting_for_log == ""
    assert runner.progress.applied == len(events), "nothing polled before the outage was lost or applied twice"
    reference = SqliteLog(tmp_path / "ref.sqlite3", partitions=PARTS)
    Journal(reference).append_batch(events)
    ref = store.create_set("reference", source="embedded").set_id
    ProjectionRunner(store, ref, EmbeddedSource(reference), batch_size=1000).run(until_caught_up=True)
    assert support.snapshot(store, sid) == support.snapshot(store, ref)


def test_a_log_out_of_reach_past_the_bound_ends_the_runner_with_its_error(
        support: ModuleType, open_store: Callable[[], ProjectionStore], broker: Any, unique_topic: str) -> None:
    provision_topic(broker.bootstrap, unique_topic, PARTS)
    events = support.election_log(10)
    support.produce(broker.bootstrap, unique_topic, events, PARTS)
    store = open_store()
    sid = store.ensure_serving("tally", source="kafka").set_id
    runner = _runner(store, sid, broker.bootstrap, unique_topic, retry=3)
    stop, errors = threading.Event(), []
    thread = _start(runner, stop, errors)
    try:
        support.wait_for(lambda: _count(store, sid) == len(events) or bool(errors), 60, "the events applied")
        with _hung(broker):
            thread.join(60)
            assert not thread.is_alive(), "the runner still waits past its bound"
    finally:
        stop.set()
        thread.join(30)
    assert len(errors) == 1 and isinstance(errors[0], LogUnavailableError), errors
    assert runner.progress.log_outages >= 1


@pytest.fixture(params=["postgres"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


class _FailsOnceWithABatchInHand(EmbeddedSource):
    """The embedded log, whose marks cannot be read once, just after a poll handed out records: the
    runner's checks before applying them fail with the batch in hand."""

    def __init__(self, log: Any) -> None:
        super().__init__(log, hw_refresh=0.0)
        self.failed = False
        self._armed = False

    def poll(self, max_records: int, timeout: float) -> list[Any]:
        records = super().poll(max_records, timeout)
        self._armed = bool(records) and not self.failed and sum(self.positions().values()) > 40
        return records

    def high_watermarks(self) -> dict[int, int]:
        if self._armed:
            self._armed, self.failed = False, True
            raise LogUnavailableError("the log is out of reach (a test's)")
        return super().high_watermarks()


def test_a_batch_in_hand_when_the_log_fails_is_read_again_not_lost(
        support: ModuleType, open_store: Callable[[], ProjectionStore], tmp_path: Path) -> None:
    events = support.election_log(40, corrections=2)
    log = SqliteLog(tmp_path / "log.sqlite3", partitions=PARTS)
    Journal(log).append_batch(events)
    store = open_store()
    sid = store.create_set("flaky", source="test").set_id
    source = _FailsOnceWithABatchInHand(SqliteLog(log.path))
    runner = ProjectionRunner(store, sid, source, batch_size=25, poll_timeout=0.01, sleep=lambda _s: None)
    deadline = time.monotonic() + 30  # records lost would leave the run short of the log for good
    progress = runner.run(until_caught_up=True, stop=lambda: time.monotonic() > deadline)
    assert progress.caught_up and source.failed and progress.log_outages == 1 and progress.waiting_for_log == ""
    assert progress.applied == len(events) and progress.duplicates == 0
    ref = store.create_set("reference", source="test").set_id
    ProjectionRunner(store, ref, EmbeddedSource(SqliteLog(log.path)), batch_size=1000).run(until_caught_up=True)
    assert support.snapshot(store, sid) == support.snapshot(store, ref)


class _IdOutOfReachThenAnother:
    """A log whose id cannot be read once (a broker electing leaders), then is another log's."""

    def __init__(self, inner: SqliteLog) -> None:
        self.inner = inner
        self.asked = 0

    def log_id_now(self) -> str | None:
        self.asked += 1
        if self.asked == 1:
            raise LogUnavailableError("the log is out of reach (a test's)")
        return "another-log"

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_the_same_log_check_put_off_by_an_outage_is_made_once_the_log_answers(
        support: ModuleType, open_store: Callable[[], ProjectionStore], tmp_path: Path) -> None:
    events = support.election_log(10)
    log = SqliteLog(tmp_path / "log.sqlite3", partitions=PARTS)
    Journal(log).append_batch(events)
    store = open_store()
    sid = store.create_set("checked", source="log:the-first-log").set_id
    log_now = _IdOutOfReachThenAnother(SqliteLog(log.path))
    runner = ProjectionRunner(store, sid, EmbeddedSource(log_now), batch_size=5, poll_timeout=0.01,  # type: ignore[arg-type]
                              built_from="log:the-first-log", sleep=lambda _s: None)
    with pytest.raises(LogReplacedError, match="another-log"):
        runner.run(stop=lambda: runner.progress.applied >= len(events))
    assert log_now.asked == 2 and runner.progress.log_outages == 1


class _AnswersButNeverReads(EmbeddedSource):
    """A log that answers when asked for its marks but fails every read (a broker whose metadata
    answers while its partitions' leaders are gone)."""

    def poll(self, max_records: int, timeout: float) -> list[Any]:
        raise LogUnavailableError("the partitions cannot be read (a test's)")


def test_a_log_that_answers_but_never_reads_is_not_waited_for_without_end(
        support: ModuleType, open_store: Callable[[], ProjectionStore], tmp_path: Path) -> None:
    log = SqliteLog(tmp_path / "log.sqlite3", partitions=PARTS)
    Journal(log).append_batch(support.election_log(5))
    store = open_store()
    sid = store.create_set("unreadable", source="test").set_id
    runner = ProjectionRunner(store, sid, _AnswersButNeverReads(SqliteLog(log.path)), batch_size=10,
                              poll_timeout=0.01, log_retry_seconds=0.6)
    deadline = time.monotonic() + 20  # without the bound, the wait would end only here
    with pytest.raises(LogUnavailableError, match="cannot be read"):
        runner.run(stop=lambda: time.monotonic() > deadline)
    assert time.monotonic() < deadline and runner.progress.log_outages == 1 and runner.progress.applied == 0  # one outage


class _IdNeverInReach:
    """A log whose records read but whose id never can (a Kafka cluster whose meta topic has no leader)."""

    def __init__(self, inner: SqliteLog) -> None:
        self.inner = inner

    def log_id_now(self) -> str | None:
        raise LogUnavailableError("the log's id is out of reach (a test's)")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def test_a_check_that_keeps_failing_after_good_reads_is_not_waited_for_without_end(
        support: ModuleType, open_store: Callable[[], ProjectionStore], tmp_path: Path) -> None:
    """The outage ended at every good read: a check after it (the same-log check before saying caught up)
    failing each time started the wait again, without end."""
    log = SqliteLog(tmp_path / "log.sqlite3", partitions=PARTS)
    Journal(log).append_batch(support.election_log(5))
    store = open_store()
    sid = store.create_set("unchecked", source="log:some-log").set_id
    runner = ProjectionRunner(store, sid, EmbeddedSource(_IdNeverInReach(SqliteLog(log.path))), batch_size=10,  # type: ignore[arg-type]
                              poll_timeout=0.01, built_from="log:some-log", log_retry_seconds=0.6)
    deadline = time.monotonic() + 20
    with pytest.raises(LogUnavailableError, match="id is out of reach"):
        runner.run(until_caught_up=True, stop=lambda: time.monotonic() > deadline)
    assert time.monotonic() < deadline and runner.progress.log_outages == 1
