"""The runner on a Kafka topic (the session's Tansu broker), against both stores."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ledger.log.kafka import provision_topic
from ledger.journal import Journal
from ledger.log.kafka import KafkaLog
from ledger.log.port import LogLostError
from ledger.log.sqlite import SqliteLog
from projections.runner import ProjectionRunner
from projections.kafka_source import KafkaGroupSource
from projections.sources import EmbeddedSource
from projections.stores.port import ProjectionStore

Open = Callable[[], ProjectionStore]
PARTS = 8
SESSION_MS = 2000


def _source(bootstrap: str, topic: str, group: str = "g", batch: int = 100, quiet_check: float = 10.0) -> KafkaGroupSource:
    log = KafkaLog(bootstrap, topic, partitions=PARTS, session_timeout_ms=SESSION_MS)
    return KafkaGroupSource(log, group, max_poll_records=batch, quiet_check=quiet_check)


def _runner(store: ProjectionStore, set_id: int, bootstrap: str, topic: str, *, group: str = "g", batch: int = 100,
            quiet_check: float = 10.0) -> ProjectionRunner:
    # One group per topic: tests share the session's broker, and a group name reused by a later test
    # (with another topic) can wait on the broker's memory of earlier members.
    source = _source(bootstrap, topic, f"{group}-{topic}", batch, quiet_check)
    return ProjectionRunner(store, set_id, source, batch_size=batch, poll_timeout=0.1)


def _embedded_reference(support: ModuleType, store: ProjectionStore, events: list[Any], tmp_path: Path) -> int:
    log = SqliteLog(tmp_path / "ref.sqlite3", partitions=PARTS)
    Journal(log).append_batch(events)
    sid = store.create_set("reference", source="embedded").set_id
    ProjectionRunner(store, sid, EmbeddedSource(log), batch_size=1000).run(until_caught_up=True)
    return sid


def test_kafka_run_equals_the_embedded_run(
    support: ModuleType, open_store: Open, kafka_bootstrap: str, unique_topic: str, tmp_path: Path
) -> None:
    provision_topic(kafka_bootstrap, unique_topic, PARTS)
    events = support.election_log(80, corrections=2, rejections=1)
    support.produce(kafka_bootstrap, unique_topic, events, PARTS)
    store = open_store()
    sid = store.ensure_serving("tally", source="kafka").set_id
    runner = _runner(store, sid, kafka_bootstrap, unique_topic)
    progress = runner.run(until_caught_up=True)
    assert progress.applied == len(events) and progress.lag_events == 0
    ref = _embedded_reference(support, store, events, tmp_path)
    assert support.snapshot(store, sid) == support.snapshot(store, ref)


def test_restart_resumes_from_stored_positions_and_drops_duplicates(
    support: ModuleType, open_store: Open, kafka_bootstrap: str, unique_topic: str, tmp_path: Path
) -> None:
    provision_topic(kafka_bootstrap, unique_topic, PARTS)
    events = support.election_log(100, corrections=2)
    support.produce(kafka_bootstrap, unique_topic, events, PARTS, duplicate=events[10:14])
    store = open_store()
    sid = store.ensure_serving("tally", source="kafka").set_id
    one = _runner(store, sid, kafka_bootstrap, unique_topic, batch=40)
    first = one.run(stop=lambda: one.progress.batches >= 6)
    assert 0 < first.applied < len(events)
    again = open_store()
    second = _runner(again, sid, kafka_bootstrap, unique_topic, batch=40).run(until_caught_up=True)
    assert first.applied + second.applied == len(events)
    assert first.duplicates + second.duplicates == 4
    ref = _embedded_reference(support, again, events, tmp_path)
    assert support.snapshot(again, sid) == support.snapshot(again, ref)


def test_two_runners_in_one_group_split_partitions_and_equal_one_runner(
    support: ModuleType, open_store: Open, kafka_bootstrap: str, unique_topic: str, tmp_path: Path
) -> None:
    provision_topic(kafka_bootstrap, unique_topic, PARTS)
    s1, s2 = open_store(), open_store()
    sid = s1.ensure_serving("tally", source="kafka").set_id
    stop = threading.Event()
    runners = [_runner(s, sid, kafka_bootstrap, unique_topic, group="pair", batch=25) for s in (s1, s2)]
    threads = [threading.Thread(target=r.run, kwargs={"stop": stop.is_set}, daemon=True) for r in runners]
    events = support.election_log(120, corrections=2, rejections=1)
    reader = open_store()
    try:
        threads[0].start()
        support.wait_for(lambda: runners[0].source.ready, 30, "the first runner to join")
        threads[1].start()
        support.wait_for(
            lambda: all(r.source.assigned() for r in runners)
            and not (runners[0].source.assigned() & runners[1].source.assigned())
            and len(runners[0].source.assigned() | runners[1].source.assigned()) == PARTS,
            60, "the group to split the partitions",
        )
        # The definition lands in one runner's partition, the units in both.
        support.produce(kafka_bootstrap, unique_topic, events, PARTS)
        support.wait_for(lambda: _count(reader, sid) == len(events), 120, "all events applied")
    finally:
        stop.set()
        for t in threads:
            if t.is_alive() or t.ident is not None:
                t.join(30)
    assert all(r.progress.applied > 0 for r in runners), "both runners did part of the work"
    assert sum(r.progress.applied for r in runners) == len(events)
    ref = _embedded_reference(support, reader, events, tmp_path)
    assert support.snapshot(reader, sid) == support.snapshot(reader, ref)


def _count(store: ProjectionStore, sid: int) -> int:
    with store.reader(sid) as r:
        return r.event_count()


def test_a_restarted_broker_is_reported_as_a_lost_log(
    support: ModuleType, open_store: Open, broker: Any, unique_topic: str
) -> None:
    bootstrap = broker.bootstrap
    provision_topic(bootstrap, unique_topic, PARTS)
    events = support.election_log(20)
    support.produce(bootstrap, unique_topic, events, PARTS)
    store = open_store()
    sid = store.ensure_serving("tally", source="kafka").set_id
    assert _runner(store, sid, bootstrap, unique_topic).run(until_caught_up=True).applied == len(events)
    broker.restart()  # memory only: the topic and its records are gone
    with pytest.raises(LogLostError, match="log lost or rewound"):
        _runner(store, sid, bootstrap, unique_topic).run(until_caught_up=True)


def test_a_log_lost_and_made_again_before_anything_was_applied_is_another_log(
    support: ModuleType, open_store: Open, broker: Any, unique_topic: str
) -> None:
    """No stored position can tell an empty topic made again from the log the projection names (all
    are 0); its id can. The runner's own consumer makes the missing topic again, so the run would
    otherwise end caught up, having applied nothing, on another log."""
    from ledger.log.port import LogReplacedError

    bootstrap = broker.bootstrap
    with KafkaLog(bootstrap, unique_topic, partitions=PARTS) as log:
        log_id = log.ensure_log_id()
    store = open_store()
    sid = store.ensure_serving("tally", source=f"log:{log_id}").set_id
    broker.restart()  # memory only: both topics, the log's id with them, are gone
    source = _source(bootstrap, unique_topic, f"g-{unique_topic}")
    runner = ProjectionRunner(store, sid, source, batch_size=100, poll_timeout=0.1, built_from=f"log:{log_id}")
    with pytest.raises(LogReplacedError, match=f"a log with no id, not log {log_id}"):
        runner.run(until_caught_up=True)
    assert runner.progress.applied == 0
    # the same log, written to meanwhile: the run goes on and applies it
    with KafkaLog(bootstrap, unique_topic, partitions=PARTS) as log:
        again = log.ensure_log_id()
    events = support.election_log(5)
    support.produce(bootstrap, unique_topic, events, PARTS)
    other = store.ensure_serving("again", source=f"log:{again}").set_id
    done = ProjectionRunner(store, other, _source(bootstrap, unique_topic, f"h-{unique_topic}"), batch_size=100,
                            poll_timeout=0.1, built_from=f"log:{again}").run(until_caught_up=True)
    assert done.applied == len(events)


def test_a_restarted_broker_written_again_past_the_stored_positions_is_a_rewound_log(
    support: ModuleType, open_store: Open, broker: Any, unique_topic: str
) -> None:
    """The same topic, emptied by the restart and refilled with more (other) events than the
    projection applied: its high watermarks are past every stored position, so only the record at a
    stored position tells that the log is not the one applied."""
    from projections.log_continuity import LogRewoundError

    bootstrap = broker.bootstrap
    provision_topic(bootstrap, unique_topic, PARTS)
    events = support.election_log(10)
    support.produce(bootstrap, unique_topic, events, PARTS, duplicate=events)  # each partition ends in a repeat
    store = open_store()
    sid = store.ensure_serving("tally", source="kafka").set_id
    assert _runner(store, sid, bootstrap, unique_topic).run(until_caught_up=True).applied == len(events)
    later = support.election_log(2, election_id="e3")
    support.produce(bootstrap, unique_topic, later, PARTS)
    # the same log: the repeats that end each partition were applied (as repeats), so the runner goes on
    assert _runner(store, sid, bootstrap, unique_topic).run(until_caught_up=True).applied == len(later)
    with store.reader(sid) as r:
        stored = {p: row.next_offset for p, row in r.positions().items()}
    broker.restart()
    provision_topic(bootstrap, unique_topic, PARTS)
    support.produce(bootstrap, unique_topic, support.election_log(60, election_id="e2"), PARTS)
    with pytest.raises(LogRewoundError, match="not the event this projection applied there"):
        _runner(store, sid, bootstrap, unique_topic).run(until_caught_up=True)
    with store.reader(sid) as r:
        assert {p: row.next_offset for p, row in r.positions().items()} == stored


def test_a_broker_restart_under_a_running_runner_ends_it_with_a_lost_log(
    support: ModuleType, open_store: Open, broker: Any, unique_topic: str
) -> None:
    bootstrap = broker.bootstrap
    provision_topic(bootstrap, unique_topic, PARTS)
    events = support.election_log(20)
    support.produce(bootstrap, unique_topic, events, PARTS)
    store = open_store()
    sid = store.ensure_serving("tally", source="kafka").set_id
    runner = _runner(store, sid, bootstrap, unique_topic, quiet_check=1.0)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            runner.run()
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            failure.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    support.wait_for(lambda: runner.progress.applied == len(events), 60, "the runner to catch up")
    broker.restart()
    thread.join(60)
    assert not thread.is_alive(), "the runner must not wait forever on a lost log"
    assert len(failure) == 1 and isinstance(failure[0], LogLostError), failure


def test_sigkill_of_a_kafka_runner_then_restart_equals_a_clean_replay(
    support: ModuleType, open_store: Open, kafka_bootstrap: str, unique_topic: str, tmp_path: Path, database_url: str | None
) -> None:
    provision_topic(kafka_bootstrap, unique_topic, PARTS)
    events = support.election_log(1200, corrections=2, rejections=1)
    support.produce(kafka_bootstrap, unique_topic, events, PARTS)
    data = tmp_path / "data"
    base = [str(Path(sys.executable).parent / "caucus"), "--data-dir", str(data), "--kafka", kafka_bootstrap, "--topic", unique_topic]
    if database_url:
        base += ["--database", database_url]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUCUS_") or k == "CAUCUS_KEY_HOME"}
    opts = ["--session-timeout-ms", str(SESSION_MS), "--group", f"kill-{unique_topic}", "-q"]
    if database_url:
        from projections.stores.postgres import PostgresStore

        store: ProjectionStore = PostgresStore(database_url)
    else:
        from projections.stores.sqlite import SqliteStore

        store = SqliteStore(data / "store.sqlite3")
    proc = subprocess.Popen([*base, "project", "--batch-size", "20", *opts], env=env)
    try:
        support.wait_for(lambda: store.serving("tally") is not None and _count(store, store.serving("tally").set_id) >= 300,  # type: ignore[union-attr]
                         90, "the runner to apply 300 events")
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
    sid = store.serving("tally").set_id  # type: ignore[union-attr]
    assert 0 < _count(store, sid) < len(events)
    done = subprocess.run([*base, "project", "--until-caught-up", *opts], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _count(store, sid) == len(events)
    ref_store = open_store()
    ref = _embedded_reference(support, ref_store, events, tmp_path)
    assert support.snapshot(store, sid) == support.snapshot(ref_store, ref)
    store.close()


def test_an_empty_topic_is_caught_up(open_store: Open, kafka_bootstrap: str, unique_topic: str) -> None:
    store = open_store()
    sid = store.ensure_serving("tally", source="kafka").set_id
    progress = _runner(store, sid, kafka_bootstrap, unique_topic).run(until_caught_up=True)  # the log creates the topic
    assert progress.caught_up and progress.applied == 0 and progress.assigned == set(range(PARTS))


def test_trail_reads_the_unit_back_from_the_topic(
    support: ModuleType, open_store: Open, kafka_bootstrap: str, unique_topic: str
) -> None:
    from projections.trail import unit_trail

    provision_topic(kafka_bootstrap, unique_topic, PARTS)
    events = support.election_log(15, corrections=2, rejections=1)
    support.produce(kafka_bootstrap, unique_topic, events, PARTS)
    store = open_store()
    sid = store.ensure_serving("tally", source="kafka").set_id
    _runner(store, sid, kafka_bootstrap, unique_topic).run(until_caught_up=True)
    unit = "u00004"
    log = KafkaLog(kafka_bootstrap, unique_topic, partitions=PARTS)
    try:
        with store.reader(sid) as r:
            trail = unit_trail(log, r, "e1", unit)
            stored = r.tallies(keys=[("e1", unit)])["e1", unit].tally
    finally:
        log.close()
    assert [e.event.event_id for e in trail.entries] == [e.event_id for e in events if e.unit_id == unit]
    assert trail.entries[-1].tally.dumps() == stored
