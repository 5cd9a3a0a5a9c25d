"""The EventLog contract, run against every adapter: the embedded SQLite log, a Kafka topic on the
session's Tansu broker (through kafka-python, and through confluent-kafka when it is installed) and the in-memory log. Then what only one adapter can show: a broker that restarts empty, a broker that
is gone, consumer groups (Kafka); triggers and several processes on one file (SQLite)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from infra.broker import LocalBroker, free_port
from ledger.log.kafka import KafkaLog, SeekToStored
from ledger.log.memory import MemoryLog, forget
from ledger.log.partitioning import partition_for
from ledger.log.port import (
    EventLog,
    LogError,
    LogLostError,
    LogMissingError,
    LogUnavailableError,
    PendingRecord,
    Position,
    StoredRecord,
)
from ledger.log.sqlite import SqliteLog

DEADLINE_S = 15.0
CONFLUENT_MISSING = "confluent-kafka is not installed (pip install -e '.[confluent]')"


def record(key: str, n: int = 0) -> PendingRecord:
    """A record whose value says which key and which append it was (so reads can be checked)."""
    return PendingRecord(key=key, event_id=str(uuid.uuid4()), value=f"{key}#{n}".encode())


def keys(count: int, prefix: str = "unit") -> list[str]:
    return [f"{prefix}-{i:04d}" for i in range(count)]


def by_partition(records: list[StoredRecord]) -> dict[int, list[int]]:
    offsets: dict[int, list[int]] = defaultdict(list)
    for rec in records:
        offsets[rec.position.partition].append(rec.position.offset)
    return offsets


@pytest.fixture(params=["sqlite", "kafka", "memory", "confluent"])
def make_log(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., EventLog]]:
    """Opens the parametrised adapter; every call opens the same log (same file, topic or name)."""
    opened: list[EventLog] = []
    if request.param == "sqlite":
        def make(partitions: int = 8) -> EventLog:
            log = SqliteLog(tmp_path / "log.sqlite3", partitions=partitions)
            opened.append(log)
            return log
    elif request.param == "memory":
        name = f"contract-{uuid.uuid4().hex}"

        def make(partitions: int = 8) -> EventLog:
            log = MemoryLog(name, partitions=partitions)
            opened.append(log)
            return log
    else:
        bootstrap = request.getfixturevalue("kafka_bootstrap")
        topic = request.getfixturevalue("unique_topic")
        adapter: Callable[..., EventLog] = KafkaLog
        if request.param == "confluent":
            adapter = pytest.importorskip("ledger.log.kafka_confluent", reason=CONFLUENT_MISSING).ConfluentLog

        def make(partitions: int = 8) -> EventLog:
            log = adapter(bootstrap, topic, partitions=partitions, timeout=5)
            opened.append(log)
            return log
    yield make
    for log in opened:
        log.close()
    if request.param == "memory":
        forget(name)


@pytest.fixture
def log(make_log: Callable[..., EventLog]) -> EventLog:
    return make_log()


# ----------------------------------------------------------------------------------------- contract
def test_adapter_implements_the_port(log: EventLog) -> None:
    assert isinstance(log, EventLog)


def test_fresh_log_is_empty_with_every_partition_at_zero(log: EventLog) -> None:
    assert log.partitions == 8
    assert log.high_watermarks() == {p: 0 for p in range(8)}
    assert list(log.read()) == []


def test_partition_count_is_configurable_and_fixed(make_log: Callable[..., EventLog]) -> None:
    log = make_log(partitions=3)
    assert log.partitions == 3
    positions = log.append_batch([record(k) for k in keys(30)])
    assert {p.partition for p in positions} == {0, 1, 2}
    assert set(log.high_watermarks()) == {0, 1, 2}
    assert sum(log.high_watermarks().values()) == 30
    with pytest.raises(LogError, match="partitions"):
        make_log(partitions=5)
    assert len(list(make_log(partitions=3).read())) == 30


def test_key_decides_the_partition_and_offsets_count_per_partition(log: EventLog) -> None:
    batch = [record(k, n) for n in range(3) for k in keys(40)]
    positions = log.append_batch(batch)
    next_offset: dict[int, int] = defaultdict(int)
    for rec, pos in zip(batch, positions, strict=True):
        assert pos.partition == partition_for(rec.key, 8)
        assert pos.offset == next_offset[pos.partition]
        next_offset[pos.partition] += 1


def test_a_record_that_names_its_partition_goes_there(log: EventLog) -> None:
    """A copy kept under another key in the partition of the record it copies (``ledger.log.latest``)."""
    key = "unit:e1:u00001"
    wanted = (partition_for(key, 8) + 3) % 8
    first, second = log.append_batch([PendingRecord(key, str(uuid.uuid4()), b"a", (), partition=wanted),
                                      PendingRecord(key, str(uuid.uuid4()), b"b", (), partition=wanted)])
    assert (first.partition, second.partition) == (wanted, wanted) and second.offset == first.offset + 1
    assert [r.value for r in log.read() if r.key == key] == [b"a", b"b"]
    with pytest.raises(LogError, match="partition 8 does not exist"):
        log.append_batch([PendingRecord(key, str(uuid.uuid4()), b"c", (), partition=8)])


def test_per_key_order_is_kept(log: EventLog) -> None:
    units = keys(25)
    appended: dict[str, list[bytes]] = defaultdict(list)
    n = 0
    for round_ in range(6):  # single appends and batches, interleaved across keys
        if round_ % 2:
            batch = [record(k, n + i) for i, k in enumerate(units)]
            log.append_batch(batch)
        else:
            batch = [record(k, n + i) for i, k in enumerate(reversed(units))]
            for rec in batch:
                log.append(rec)
        n += len(units)
        for rec in batch:
            appended[rec.key].append(rec.value)
    read_back: dict[str, list[bytes]] = defaultdict(list)
    stored = list(log.read())
    for rec in stored:
        read_back[rec.key].append(rec.value)
    assert read_back == appended
    for offsets in by_partition(stored).values():
        assert offsets == sorted(offsets)


def test_nothing_is_lost_across_many_keys(log: EventLog) -> None:
    batch = [record(k, n) for n in range(8) for k in keys(300)]
    positions: list[Position] = []
    for i in range(0, len(batch), 400):
        positions += log.append_batch(batch[i : i + 400])
    stored = list(log.read())
    assert len(stored) == len(batch)
    assert {(r.position, r.key, r.value) for r in stored} == {
        (p, r.key, r.value) for p, r in zip(positions, batch, strict=True)
    }
    expected_marks = {p: 0 for p in range(8)}
    for pos in positions:
        expected_marks[pos.partition] = max(expected_marks[pos.partition], pos.offset + 1)
    assert log.high_watermarks() == expected_marks
    assert all(r.timestamp_ms > 0 for r in stored)


def test_retried_append_writes_nothing_new(log: EventLog) -> None:
    single = record("unit-a")
    first = log.append(single)
    assert log.append(single) == first

    batch = [record("unit-b"), record("unit-c"), record("unit-a", 1)]
    positions = log.append_batch(batch)
    extra = record("unit-d")
    retried = log.append_batch([*batch, extra])
    assert retried[:3] == positions
    assert retried[3] not in positions

    twice = record("unit-e")
    a, b = log.append_batch([twice, twice])
    assert a == b

    stored = list(log.read())
    assert len(stored) == 6  # single, three of the batch, extra, twice
    assert sorted(r.value for r in stored) == sorted(
        [single.value, *(r.value for r in batch), extra.value, twice.value]
    )
    assert sum(log.high_watermarks().values()) == 6


def test_read_from_a_position(log: EventLog) -> None:
    log.append_batch([record(k, n) for n in range(4) for k in keys(60)])
    marks = log.high_watermarks()
    busiest = max(marks, key=lambda p: marks[p])
    start = {busiest: marks[busiest] // 2}
    stored = list(log.read(start))
    assert len(stored) == sum(marks.values()) - marks[busiest] // 2
    assert min(by_partition(stored)[busiest]) == marks[busiest] // 2

    at_end = list(log.read(marks))
    assert at_end == []

    limited = list(log.read(max_records=7))
    assert len(limited) == 7


def test_read_stops_at_the_high_watermarks_of_the_call(log: EventLog) -> None:
    log.append_batch([record(k) for k in keys(50)])
    reader = log.read()
    first = next(reader)
    log.append_batch([record(k, 1) for k in keys(50)])
    rest = list(reader)
    assert len([first, *rest]) == 50
    assert sum(log.high_watermarks().values()) == 100


def test_follow_sees_events_appended_after_it_started(log: EventLog) -> None:
    log.append_batch([record(k) for k in keys(20)])
    start = log.high_watermarks()
    later = [record(k, 1) for k in keys(20)] + [record("unit-late", 2)]
    seen: list[StoredRecord] = []
    following = threading.Event()
    deadline = time.monotonic() + DEADLINE_S
    errors: list[BaseException] = []

    def stop() -> bool:
        following.set()  # follow() asks before its first wait: from here on it is following
        return len(seen) >= len(later) or time.monotonic() > deadline

    def run() -> None:
        try:
            for rec in log.follow(start, stop=stop, poll_interval=0.05):
                seen.append(rec)
        except BaseException as exc:  # noqa: BLE001 -- reported to the test thread
            errors.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    assert following.wait(DEADLINE_S)
    positions = log.append_batch(later[:10])
    positions += [log.append(rec) for rec in later[10:]]
    thread.join(DEADLINE_S + 5)
    assert not thread.is_alive() and not errors
    assert sorted(r.position for r in seen) == sorted(positions)
    assert {r.value for r in seen} == {r.value for r in later}


def test_start_beyond_the_high_watermark_is_a_lost_log(log: EventLog) -> None:
    with pytest.raises(LogLostError) as fresh:
        list(log.read({3: 1}))
    assert (fresh.value.partition, fresh.value.expected, fresh.value.high_watermark) == (3, 1, 0)

    log.append_batch([record(k) for k in keys(40)])
    marks = log.high_watermarks()
    part = max(marks, key=lambda p: marks[p])
    began = time.monotonic()
    with pytest.raises(LogLostError, match=f"partition {part}") as caught:
        list(log.read({part: marks[part] + 5}))
    assert caught.value.high_watermark == marks[part]
    with pytest.raises(LogLostError):
        next(iter(log.follow({part: marks[part] + 1}, stop=lambda: True)))
    assert time.monotonic() - began < 5, "a lost log is reported, not waited on"


def test_unknown_partition_is_refused(log: EventLog) -> None:
    with pytest.raises(LogError, match="partition 99"):
        list(log.read({99: 0}))


def test_same_key_same_position_in_both_adapters(tmp_path: Path, kafka_bootstrap: str, unique_topic: str) -> None:
    batch = [record(k, n) for n in range(3) for k in keys(100, prefix="precinct")]
    with SqliteLog(tmp_path / "log.sqlite3") as embedded, KafkaLog(kafka_bootstrap, unique_topic) as kafka:
        assert embedded.append_batch(batch) == kafka.append_batch(batch)
        assert embedded.high_watermarks() == kafka.high_watermarks()


def test_memory_log_places_keys_as_the_embedded_log(tmp_path: Path) -> None:
    batch = [record(k, n) for n in range(3) for k in keys(100, prefix="precinct")]
    name = f"same-{uuid.uuid4().hex}"
    try:
        with SqliteLog(tmp_path / "log.sqlite3") as embedded, MemoryLog(name) as memory:
            assert embedded.append_batch(batch) == memory.append_batch(batch)
            assert embedded.high_watermarks() == memory.high_watermarks()
    finally:
        forget(name)


# ---------------------------------------------------------------------------------------- memory only
def test_memory_log_readers_find_only_a_log_that_exists_and_never_write() -> None:
    name = f"ro-{uuid.uuid4().hex}"
    with pytest.raises(LogMissingError):
        MemoryLog(name, read_only=True)
    with pytest.raises(LogMissingError):
        MemoryLog(name, create=False)
    try:
        writer = MemoryLog(name, partitions=3)
        writer.append(record("unit-a"))
        reader = MemoryLog(name, read_only=True)
        assert (reader.partitions, reader.log_id) == (3, writer.log_id)
        assert [r.key for r in reader.read()] == ["unit-a"]
        with pytest.raises(LogError, match="read-only"):
            reader.append(record("unit-b"))
    finally:
        forget(name)
    with pytest.raises(LogMissingError):
        MemoryLog(name, read_only=True)


# ----------------------------------------------------------------------------------------- Kafka only
def test_kafka_broker_restarted_empty_is_a_lost_log_and_the_producer_recovers(
    broker: LocalBroker, kafka_bootstrap: str, unique_topic: str
) -> None:
    with KafkaLog(kafka_bootstrap, unique_topic, timeout=5) as log:
        before = [record(k) for k in keys(30)]
        log.append_batch(before)
        stored_position = log.high_watermarks()  # what a projection would have stored
        broker.restart()

        with pytest.raises(LogLostError) as caught:
            list(log.read(stored_position))
        assert caught.value.high_watermark == 0

        after = record("unit-after-restart")
        position = log.append(after)
        assert position.offset == 0
        # an event appended before the restart was lost with the log: a retry writes it again
        again = log.append(before[0])
        assert again.offset == (1 if again.partition == position.partition else 0)
        assert {r.value for r in log.read()} == {after.value, before[0].value}
        assert log.partitions == 8 and sum(log.high_watermarks().values()) == 2


def test_kafka_follower_reports_a_broker_restart_as_a_lost_log(
    broker: LocalBroker, kafka_bootstrap: str, unique_topic: str
) -> None:
    with KafkaLog(kafka_bootstrap, unique_topic, timeout=5) as log:
        log.append_batch([record(k) for k in keys(40)])
        following = threading.Event()
        deadline = time.monotonic() + DEADLINE_S
        outcome: list[BaseException | str] = []

        def stop() -> bool:
            following.set()
            return time.monotonic() > deadline

        def run() -> None:
            try:
                for _ in log.follow(stop=stop, poll_interval=0.05):
                    pass
                outcome.append("stopped at the deadline")
            except BaseException as exc:  # noqa: BLE001 -- reported to the test thread
                outcome.append(exc)

        thread = threading.Thread(target=run)
        thread.start()
        assert following.wait(DEADLINE_S)
        broker.restart()
        thread.join(DEADLINE_S + 5)
        assert len(outcome) == 1 and isinstance(outcome[0], LogLostError), outcome
        # a follower that outlived the restart made the broker auto-create the topic; appends still work
        assert log.append(record("unit-after")).offset == 0
        assert log.partitions == 8 and sum(log.high_watermarks().values()) == 1


def test_kafka_retry_after_the_broker_lost_the_log_writes_the_event_again(
    broker: LocalBroker, kafka_bootstrap: str, unique_topic: str
) -> None:
    with KafkaLog(kafka_bootstrap, unique_topic, timeout=5) as log:
        batch = [record(k) for k in keys(10)]
        log.append_batch(batch)
        broker.restart()
        again = log.append_batch(batch[:3])  # first thing after the restart: a retry
        assert sorted(p.offset for p in again if p.partition == again[0].partition)[0] == 0
        assert sorted(r.value for r in log.read()) == sorted(r.value for r in batch[:3])


def test_kafka_unreachable_broker_fails_fast_naming_the_address() -> None:
    address = f"127.0.0.1:{free_port()}"
    began = time.monotonic()
    with pytest.raises(LogUnavailableError, match=address):
        KafkaLog(address, "caucus.events", timeout=1)
    assert time.monotonic() - began < 5


def test_kafka_broker_gone_while_open_is_unavailable_not_a_hang(
    broker: LocalBroker, kafka_bootstrap: str, unique_topic: str
) -> None:
    log = KafkaLog(kafka_bootstrap, unique_topic, timeout=1)
    try:
        log.append(record("unit-a"))
        broker.stop()
        began = time.monotonic()
        with pytest.raises(LogUnavailableError, match=kafka_bootstrap):
            log.append(record("unit-b"))
        with pytest.raises(LogUnavailableError, match=kafka_bootstrap):
            list(log.read())
        with pytest.raises(LogUnavailableError, match=kafka_bootstrap):
            log.high_watermarks()
        assert time.monotonic() - began < 10
    finally:
        log.close()


def test_kafka_group_consumer_starts_at_stored_positions(kafka_bootstrap: str, unique_topic: str) -> None:
    with KafkaLog(kafka_bootstrap, unique_topic, session_timeout_ms=2000) as log:
        positions = log.append_batch([record(k, n) for n in range(3) for k in keys(40)])
        marks = log.high_watermarks()
        stored = {p: marks[p] - 1 for p in marks if marks[p] > 0}  # as if all but the last were applied
        consumer = log.consumer(group_id=f"g-{unique_topic}")
        try:
            consumer.subscribe([log.topic], listener=SeekToStored(consumer, lambda parts: {p: stored[p] for p in parts if p in stored}))
            got: list[StoredRecord] = []
            deadline = time.monotonic() + DEADLINE_S
            while len(got) < len(stored) and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=100).values():
                    got += [log.stored(r) for r in records]
                log.check_lost(consumer, stored)
        finally:
            consumer.close()
        assert sorted(r.position for r in got) == sorted(Position(p, o) for p, o in stored.items())
        assert set(r.position for r in got) <= set(positions)


# ----------------------------------------------------------------------------------------- SQLite only
def test_sqlite_schema_refuses_update_and_delete(tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    with SqliteLog(path) as log:
        log.append(record("unit-a"))
    conn = sqlite3.connect(path)
    try:
        with pytest.raises(sqlite3.DatabaseError, match="append-only: records cannot be updated"):
            conn.execute("UPDATE log_records SET value = x'00'")
        with pytest.raises(sqlite3.DatabaseError, match="append-only: records cannot be deleted"):
            conn.execute("DELETE FROM log_records")
        with pytest.raises(sqlite3.DatabaseError, match="fixed when the log is created"):
            conn.execute("UPDATE log_meta SET value = '4' WHERE name = 'partitions'")
        assert conn.execute("SELECT COUNT(*) FROM log_records").fetchone() == (1,)
    finally:
        conn.close()


# Other processes run small scripts (``python -c``), so they import only the ledger, whatever way
# pytest imported this module.
_APPENDER = """
import sys, uuid
from ledger.log.port import PendingRecord
from ledger.log.sqlite import SqliteLog
path, prefix, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
sys.stdin.readline()  # "go": both writers start together
with SqliteLog(path) as log:
    for i in range(0, count, 20):
        log.append_batch([PendingRecord(f"unit-{(i + j) % 30:02d}", str(uuid.uuid4()), f"{prefix}#{i + j}".encode())
                          for j in range(20)])
        log.append(PendingRecord(f"{prefix}-solo", str(uuid.uuid4()), f"{prefix}-solo#{i}".encode()))
"""

_FOLLOWER = """
import json, sys, time
from ledger.log.sqlite import SqliteLog
path, start, count, deadline = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), time.monotonic() + float(sys.argv[4])
seen = []
announced = False

def stop():
    global announced
    if not announced:
        print("following", flush=True)
        announced = True
    return len(seen) >= count or time.monotonic() > deadline

with SqliteLog(path) as log:
    for rec in log.follow({int(p): o for p, o in start.items()}, stop=stop, poll_interval=0.02):
        seen.append([rec.position.partition, rec.position.offset])
print(json.dumps(seen), flush=True)
"""


def _python(script: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", script, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )


def test_sqlite_two_processes_appending_lose_nothing(tmp_path: Path) -> None:
    path = str(tmp_path / "log.sqlite3")
    SqliteLog(path).close()
    writers = [_python(_APPENDER, path, prefix, "200") for prefix in ("a", "b")]
    for w in writers:
        assert w.stdin is not None
        w.stdin.write("go\n")
        w.stdin.flush()
    for w in writers:
        w.communicate(timeout=DEADLINE_S * 2)
        assert w.returncode == 0
    with SqliteLog(path) as log:
        stored = list(log.read())
    assert len(stored) == 2 * (200 + 10)
    assert len({r.value for r in stored}) == len(stored)
    for offsets in by_partition(stored).values():
        assert offsets == list(range(len(offsets)))  # no gap, no offset given twice
    for prefix in ("a", "b"):  # each writer's own key kept its order
        solo = [int(r.value.split(b"#")[1]) for r in stored if r.key == f"{prefix}-solo"]
        assert solo == list(range(0, 200, 20))


def test_sqlite_reader_in_another_process_follows(tmp_path: Path) -> None:
    path = str(tmp_path / "log.sqlite3")
    with SqliteLog(path) as log:
        log.append_batch([record(k) for k in keys(10)])
        start = log.high_watermarks()
        reader = _python(_FOLLOWER, path, json.dumps(start), "50", str(DEADLINE_S))
        try:
            assert reader.stdout is not None
            assert reader.stdout.readline().strip() == "following"
            positions = log.append_batch([record(k, 1) for k in keys(25)])
            positions += [log.append(record(k, 2)) for k in keys(25)]
            out, _ = reader.communicate(timeout=DEADLINE_S + 5)
        finally:
            reader.kill()
    assert reader.returncode == 0
    assert sorted(tuple(p) for p in json.loads(out)) == sorted((p.partition, p.offset) for p in positions)


def test_sqlite_writers_sharing_a_file_take_turns_without_gaps(tmp_path: Path) -> None:
    """Each writer keeps its partitions' next offsets between appends; another writer's commit in
    between must make it read them again, and a retry must find what the other one wrote."""
    path = tmp_path / "log.sqlite3"
    with SqliteLog(path, partitions=2) as one, SqliteLog(path) as two:
        written: dict[str, Position] = {}
        for turn in range(6):
            writer = one if turn % 2 == 0 else two
            batch = [record(f"unit-{i % 5}", turn) for i in range(7)]
            for rec, pos in zip(batch, writer.append_batch(batch)):
                written[rec.event_id] = pos
        others = [record("unit-0", 99)]
        shared = [PendingRecord("unit-1", eid, b"retried") for eid, pos in list(written.items())[7:10]]
        retried = one.append_batch([*others, *shared])
        assert retried[1:] == [written[r.event_id] for r in shared]
        stored = list(two.read())
    assert len(stored) == 6 * 7 + 1
    for offsets in by_partition(stored).values():
        assert offsets == list(range(len(offsets)))
    assert {r.position for r in stored} >= set(written.values())


def test_sqlite_append_that_fails_leaves_nothing_and_the_next_one_no_gap(tmp_path: Path) -> None:
    with SqliteLog(tmp_path / "log.sqlite3", partitions=1) as log:
        log.append_batch([record("unit-a", 0)])
        broken = PendingRecord("unit-a", str(uuid.uuid4()), None)  # type: ignore[arg-type]
        with pytest.raises(sqlite3.IntegrityError):
            log.append_batch([record("unit-a", 1), broken])
        assert log.append(record("unit-a", 2)) == Position(0, 1)
        assert [r.value for r in log.read()] == [b"unit-a#0", b"unit-a#2"]
