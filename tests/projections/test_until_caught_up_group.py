"""``--until-caught-up`` in a consumer group means the whole log, not this runner's share.

A runner restarted after a kill joins while the dead member still holds partitions; counting only its
own it would exit 0 with half the log applied (the failure this file pins). Here a live member that
holds partitions and never applies them stands in for the dead one, on the session's Tansu broker.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

import pytest

from ledger.log.kafka import KafkaLog, provision_topic
from projections.runner import Progress, ProjectionRunner, RunnerError
from projections.kafka_source import KafkaGroupSource
from projections.stores.port import ProjectionStore

Open = Callable[[], ProjectionStore]
PARTS = 6
SESSION_MS = 2000


@contextmanager
def _holder(bootstrap: str, topic: str, group: str) -> Iterator[dict[str, Any]]:
    """A member of ``group`` that takes partitions and applies nothing; its assignment is reported
    from its own thread (a consumer is not thread-safe)."""
    from kafka import errors as kafka_errors

    seen: dict[str, Any] = {"assigned": set(), "stop": threading.Event()}
    consumer = KafkaLog(bootstrap, topic, partitions=PARTS, session_timeout_ms=SESSION_MS).consumer(group_id=group)
    consumer.subscribe([topic])

    def run() -> None:
        while not seen["stop"].is_set():
            try:
                consumer.poll(timeout_ms=100, max_records=1)
            except kafka_errors.NoOffsetForPartitionError:
                pass  # never positioned: it holds the partitions without reading them
            seen["assigned"] = {tp.partition for tp in consumer.assignment()}
        consumer.close(autocommit=False)  # leaves the group: the runner is then given everything

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        seen["stop"].set()
        thread.join(30)


def _runner(store: ProjectionStore, sid: int, bootstrap: str, topic: str, group: str, others_timeout: float) -> ProjectionRunner:
    log = KafkaLog(bootstrap, topic, partitions=PARTS, session_timeout_ms=SESSION_MS)
    source = KafkaGroupSource(log, group, max_poll_records=50, static_start=False)
    return ProjectionRunner(store, sid, source, batch_size=50, poll_timeout=0.1, others_timeout=others_timeout)


def _stored(store: ProjectionStore, sid: int) -> dict[int, int]:
    with store.reader(sid) as r:
        return {p: row.next_offset for p, row in r.positions().items()}


def _start(runner: ProjectionRunner) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        try:
            out["progress"] = runner.run(until_caught_up=True)
        except BaseException as exc:  # noqa: BLE001 - handed to the test thread
            out["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def _split(support: ModuleType, runner: ProjectionRunner, holder: dict[str, Any]) -> None:
    support.wait_for(
        lambda: runner.source.assigned() and holder["assigned"]
        and not (runner.source.assigned() & holder["assigned"])
        and len(runner.source.assigned() | holder["assigned"]) == PARTS,
        60, "the group to split the partitions between the runner and the holder",
    )


def _topic_with_events(support: ModuleType, bootstrap: str, topic: str, units: int) -> tuple[list[Any], dict[int, int]]:
    provision_topic(bootstrap, topic, PARTS)
    events = support.election_log(units, corrections=2, rejections=1)
    support.produce(bootstrap, topic, events, PARTS)
    return events, KafkaLog(bootstrap, topic, partitions=PARTS).high_watermarks()


@contextmanager
def _shared_group(support: ModuleType, store: ProjectionStore, sid: int, bootstrap: str, topic: str, group: str,
                  others_timeout: float) -> Iterator[tuple[ProjectionRunner, threading.Thread, dict[str, Any], set[int]]]:
    """The holder takes every partition first, then the runner (until caught up) joins and gets a share;
    yields the runner, its thread, its outcome and the partitions the holder kept."""
    with _holder(bootstrap, topic, group) as holder:
        support.wait_for(lambda: len(holder["assigned"]) == PARTS, 60, "the holder to take every partition")
        runner = _runner(store, sid, bootstrap, topic, group, others_timeout=others_timeout)
        thread, out = _start(runner)
        _split(support, runner, holder)
        yield runner, thread, out, set(range(PARTS)) - runner.source.assigned()


def test_a_runner_waits_for_the_partitions_another_member_holds(
    support: ModuleType, open_store: Open, kafka_bootstrap: str, unique_topic: str
) -> None:
    events, marks = _topic_with_events(support, kafka_bootstrap, unique_topic, 300)
    store = open_store()
    sid = store.ensure_serving("tally", source="kafka").set_id
    with _shared_group(support, store, sid, kafka_bootstrap, unique_topic, f"whole-{unique_topic}", 0) as (runner, thread, out, held):
        own = set(range(PARTS)) - held
        support.wait_for(lambda: all(_stored(store, sid).get(p, 0) >= marks[p] for p in own), 60, "the runner's share applied")
        assert any(marks[p] > 0 for p in held), "the holder's partitions hold events"
        support.wait_for(lambda: set(runner.progress.others_behind) == {p for p in held if marks[p] > 0}, 30,
                         "the runner to report what it waits for")
        assert thread.is_alive() and "error" not in out, "with the holder's partitions unapplied the runner is not caught up"
    # The holder left: the group hands the runner every partition and it finishes the log.
    thread.join(120)
    assert not thread.is_alive() and "error" not in out, out.get("error")
    progress: Progress = out["progress"]
    assert progress.caught_up and not progress.others_behind
    assert _stored(store, sid) == {p: m for p, m in marks.items() if m > 0}
    with store.reader(sid) as r:
        assert r.event_count() == len(events)


def test_partitions_that_never_move_end_the_wait_with_an_error_naming_them(
    support: ModuleType, open_store: Open, kafka_bootstrap: str, unique_topic: str
) -> None:
    _, marks = _topic_with_events(support, kafka_bootstrap, unique_topic, 120)
    store = open_store()
    sid = store.ensure_serving("tally", source="kafka").set_id
    group = f"stall-{unique_topic}"
    with _shared_group(support, store, sid, kafka_bootstrap, unique_topic, group, 2.0) as (_, thread, out, held):
        thread.join(90)
        assert not thread.is_alive()
    error = out.get("error")
    assert isinstance(error, RunnerError), out
    text = str(error)
    assert "not caught up" in text and f"consumer group {group!r}" in text
    named = {p for p in range(PARTS) if f"{p} (applied to " in text}
    assert named == {p for p in held if marks[p] > 0}, text


@pytest.mark.parametrize("timeout", [0.0, 5.0])
def test_the_watch_resets_when_a_partition_moves(timeout: float) -> None:
    from projections.whole_log import OthersStalled, OthersWatch

    now = [0.0]
    watch = OthersWatch(timeout, clock=lambda: now[0])
    watch.observe({3: (10, 20)})
    now[0] = 4.0
    watch.observe({3: (10, 20)})
    now[0] = 8.0
    watch.observe({3: (15, 20)})  # moved: the bound starts again
    now[0] = 12.0
    watch.observe({3: (15, 20)})
    now[0] = 13.5
    if timeout:
        with pytest.raises(OthersStalled, match=r"partitions 3 \(applied to 15 of 20\)"):
            watch.observe({3: (15, 20)})
    else:
        watch.observe({3: (15, 20)})  # 0: no bound
