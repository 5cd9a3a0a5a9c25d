"""Running against a Kafka cluster (the session's Tansu broker): the log's identity, client settings,
record headers, group offsets for the cluster's lag tools, and a runner left without partitions."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from types import ModuleType

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition

from ledger.codec import default_codec
from ledger.journal import Journal
from ledger.log.kafka import KafkaLog
from ledger.log.port import LogError, LogUnavailableError
from ledger.log.sqlite import SqliteLog
from ledger.record_headers import CONTENT_TYPE
from producers.simulator import simulate_election

pytestmark = pytest.mark.kafka
FAST_JOIN = ("--session-timeout-ms", "2000")
"""Tansu takes about half the session timeout to complete a group join (DESIGN.md): short, in tests only."""


def _env(ops: ModuleType, data: Path, bootstrap: str, topic: str, **extra: str) -> dict[str, str]:
    return ops.clean_env(CAUCUS_DATA_DIR=str(data), CAUCUS_KAFKA=bootstrap, CAUCUS_TOPIC=topic,
                         CAUCUS_RESULTS_TOPIC=f"{topic}.results", **extra)


def _official(ops: ModuleType, root: Path, env: dict[str, str]) -> str:
    return json.loads(ops.ok(ops.run(["credentials", "issue", "--official", "Op", "--json"], cwd=root, env=env)).stdout)["token"]


def _other_address(bootstrap: str) -> str:
    host, port = bootstrap.rsplit(":", 1)
    assert host == "127.0.0.1"
    return f"localhost:{port}"


def test_the_log_id_is_the_same_from_every_address(kafka_bootstrap: str, unique_topic: str) -> None:
    first = KafkaLog(kafka_bootstrap, unique_topic, partitions=4)
    try:
        assert first.log_id is None  # a new topic has none until a writer asks for one
        made = first.ensure_log_id()
        assert first.ensure_log_id() == made  # written once
    finally:
        first.close()
    for address, read_only in ((_other_address(kafka_bootstrap), False), (kafka_bootstrap, True)):
        other = KafkaLog(address, unique_topic, partitions=4, read_only=read_only)
        try:
            assert other.log_id == made
        finally:
            other.close()
    another = KafkaLog(kafka_bootstrap, unique_topic + "-b", partitions=4)
    try:
        assert another.ensure_log_id() != made
    finally:
        another.close()


def test_a_reader_never_creates_a_topic(kafka_bootstrap: str, unique_topic: str) -> None:
    with pytest.raises(LogError, match="no topic"):
        KafkaLog(kafka_bootstrap, unique_topic, partitions=4, read_only=True)
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        assert unique_topic not in admin.list_topics() and f"{unique_topic}.meta" not in admin.list_topics()
    finally:
        admin.close()


@pytest.mark.slow
def test_a_store_follows_its_log_across_addresses_and_refuses_another_log(ops: ModuleType, kafka_bootstrap: str,
                                                                            unique_topic: str, tmp_path: Path) -> None:  # fmt: skip
    env = _env(ops, tmp_path / "data", kafka_bootstrap, unique_topic)
    token = _official(ops, tmp_path, env)
    ops.ok(ops.run(["simulate", "write", "--units", "12", "--token", token], cwd=tmp_path, env=env))
    ops.ok(ops.run(["project", "--until-caught-up", "-q", *FAST_JOIN, "--group", f"g-{unique_topic}"], cwd=tmp_path, env=env))
    # the same cluster by another address: the same log
    moved = {**env, "CAUCUS_KAFKA": _other_address(kafka_bootstrap)}
    ops.ok(ops.run(["project", "--until-caught-up", "-q", *FAST_JOIN, "--group", f"g-{unique_topic}"], cwd=tmp_path, env=moved))
    # another topic is another log: refused, with the one instruction that works
    other = {**env, "CAUCUS_TOPIC": unique_topic + "-other"}
    ops.ok(ops.run(["simulate", "write", "--units", "5", "--seed", "7", "--token", token], cwd=tmp_path, env=other))
    refused = ops.ok(ops.run(["project", "--until-caught-up", "-q", *FAST_JOIN, "--group", f"h-{unique_topic}"], cwd=tmp_path, env=other), 3)
    assert "another log" in refused.stderr and "caucus replay --new-log" in refused.stderr
    ops.ok(ops.run(["replay", "--new-log", "-q", *FAST_JOIN], cwd=tmp_path, env=other))
    ops.ok(ops.run(["project", "--until-caught-up", "-q", *FAST_JOIN, "--group", f"h-{unique_topic}"], cwd=tmp_path, env=other))


def test_every_record_carries_headers(kafka_bootstrap: str, unique_topic: str, tmp_path: Path) -> None:
    events = simulate_election(3, units=4)[:5]
    codec = default_codec()
    for log in (KafkaLog(kafka_bootstrap, unique_topic, partitions=4), SqliteLog(tmp_path / "log.sqlite3", partitions=4)):
        try:
            Journal(log, writer="official:Op#abc").append_batch(events)
            stored = {rec.key + str(rec.position): rec for rec in log.read()}
            assert len(stored) == len(events)
            by_id = {codec.decode(rec.value).event_id: rec for rec in stored.values()}
            for event in events:
                rec = by_id[event.event_id]
                headers = {k: v.decode() for k, v in rec.headers}
                full = {
                    "caucus-event-type": event.type,
                    "caucus-schema-fingerprint": rec.value[2:10].hex(),
                    "caucus-election": event.envelope.election_id,
                    "caucus-unit": event.envelope.unit_id,
                    "content-type": CONTENT_TYPE,
                    "caucus-writer": "official:Op#abc",
                }
                # the embedded log keeps what the value does not say (who wrote it); Kafka carries all
                assert headers == (full if isinstance(log, KafkaLog) else {"caucus-writer": "official:Op#abc"})
        finally:
            log.close()
    # what a tool without the ledger sees: a plain consumer of the topic
    consumer = KafkaConsumer(bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest", consumer_timeout_ms=3000)
    try:
        consumer.assign([TopicPartition(unique_topic, p) for p in range(4)])
        seen = [dict(m.headers) for m in consumer]
    finally:
        consumer.close()
    assert len(seen) == len(events) and all(h["caucus-event-type"] and h["content-type"] for h in seen)


@pytest.mark.slow
def test_group_offsets_mirror_the_stored_positions(ops: ModuleType, kafka_bootstrap: str, unique_topic: str, tmp_path: Path) -> None:
    env = _env(ops, tmp_path / "data", kafka_bootstrap, unique_topic)
    group = f"g-{unique_topic}"
    token = _official(ops, tmp_path, env)
    ops.ok(ops.run(["simulate", "write", "--units", "20", "--token", token], cwd=tmp_path, env=env))
    ops.ok(ops.run(["project", "--until-caught-up", "-q", *FAST_JOIN, "--group", group], cwd=tmp_path, env=env))
    stored = json.loads(ops.ok(ops.run(["projections", "--json"], cwd=tmp_path, env=env)).stdout)[0]["positions"]
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    try:
        committed = admin.list_group_offsets(group)[group]
    finally:
        admin.close()
    assert {str(tp.partition): meta.offset for tp, meta in committed.items()} == {p: o for p, o in stored.items() if o}


def test_client_settings_reach_every_client(kafka_bootstrap: str, unique_topic: str) -> None:
    options = {"receive_buffer_bytes": 262_144, "metadata.max.age.ms": 120_000, "client_id": "caucus-prod-7"}
    log = KafkaLog(kafka_bootstrap, unique_topic, partitions=4, client_options=options)
    try:
        consumer = log.consumer()
        try:
            for client in (log._producer.current, log._topics.admin, consumer):  # noqa: SLF001 -- what each client was built with
                assert client.config["receive_buffer_bytes"] == 262_144
                assert client.config["metadata_max_age_ms"] == 120_000
                assert client.config["client_id"] == "caucus-prod-7"
        finally:
            consumer.close()
    finally:
        log.close()
    with pytest.raises(LogError, match="acks"):
        KafkaLog(kafka_bootstrap, unique_topic, partitions=4, client_options={"acks": 1})


@pytest.mark.slow
def test_tls_to_a_plaintext_broker_fails_clearly(ops: ModuleType, kafka_bootstrap: str, unique_topic: str, tmp_path: Path) -> None:
    """Security settings are really used: a TLS client cannot talk to the plaintext test broker, and says so."""
    ca = tmp_path / "ca.pem"
    ca.write_text("not a certificate\n")
    with pytest.raises(LogError):
        KafkaLog(kafka_bootstrap, unique_topic, partitions=4, timeout=3, client_options={"security_protocol": "SSL", "ssl_cafile": str(ca)})
    env = _env(ops, tmp_path / "data", kafka_bootstrap, unique_topic, CAUCUS_KAFKA_SECURITY_PROTOCOL="SASL_PLAINTEXT",
               CAUCUS_KAFKA_SASL_MECHANISM="SCRAM-SHA-512", CAUCUS_KAFKA_SASL_USERNAME="u", CAUCUS_KAFKA_SASL_PASSWORD="p",
               CAUCUS_KAFKA_CLIENT='{"request_timeout_ms": 3000}')  # fmt: skip
    done = ops.ok(ops.run(["log", "info"], cwd=tmp_path, env=env, timeout=120), 2)
    assert done.stderr.startswith("error: ") and kafka_bootstrap in done.stderr


def _kill_all(procs: list[subprocess.Popen[str]]) -> None:
    for proc in procs:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=10)


@pytest.mark.slow
def test_a_runner_left_without_partitions_says_why_instead_of_waiting_forever(ops: ModuleType, kafka_bootstrap: str,
                                                                              unique_topic: str, tmp_path: Path) -> None:  # fmt: skip
    """Runners killed with SIGKILL leave a group whose members never leave (Tansu does not expire them):
    a new runner of that group gets no partition. It must rejoin and then give up with the reason (exit
    2), or get partitions and finish; never wait forever."""
    env = _env(ops, tmp_path / "data", kafka_bootstrap, unique_topic)
    token = _official(ops, tmp_path, env)
    ops.ok(ops.run(["simulate", "write", "--units", "12", "--token", token], cwd=tmp_path, env=env))
    group = f"broken-{unique_topic}"
    base = [ops.CAUCUS, "project", "-q", "--group", group, "--session-timeout-ms", "6000", "--no-feed"]
    for _round in range(2):
        procs = [subprocess.Popen(base, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, text=True)
                 for _ in range(3)]
        time.sleep(6)
        _kill_all(procs)
    began = time.monotonic()
    done = ops.run(["project", "--until-caught-up", "--group", group, "--session-timeout-ms", "6000", "--no-feed",
                    "--no-partition-timeout", "5"], cwd=tmp_path, env=env, timeout=180)
    took = time.monotonic() - began
    ops.ok(done, 0, 2)
    if done.returncode == 2:
        assert "held no partition" in done.stderr and "--group" in done.stderr, done.stderr
        assert "rejoining the group with a new consumer" in done.stderr
    assert took < 120, took


def test_kafka_progress_says_what_it_waits_for(ops: ModuleType) -> None:
    """No "partitions none yet", no "lag ?": the line says the runner waits for the group, and for how long."""
    from projections.observe import progress_line
    from projections.runner import Progress

    line = progress_line(Progress(), waiting_for_partitions=12.3, group="caucus-projections")
    assert "holds no partition for 10 s" in line and "waiting for consumer group caucus-projections" in line
    p = Progress(assigned={0, 1, 2, 3, 5})
    assert "lag unknown until each partition has answered a fetch" in progress_line(p) and "partitions 0-3,5" in progress_line(p)
    assert "?" not in progress_line(p)


def test_unavailable_broker_is_an_operational_error() -> None:
    with pytest.raises(LogUnavailableError):
        KafkaLog("127.0.0.1:1", "t", partitions=1, timeout=1)



def test_a_direct_write_run_again_appends_nothing_on_kafka(ops: ModuleType, kafka_bootstrap: str, unique_topic: str,
                                                          tmp_path: Path) -> None:
    """A Kafka topic keeps no index of the event ids it holds (the embedded log's unique index turns a
    second copy into its first position): a re-run import, simulate write or log append appended every
    event again ("appended 1868 new, 0 already in the log" twice: 3,736 records). They append only what
    the log does not hold, and say how many it held."""
    env = _env(ops, tmp_path / "data", kafka_bootstrap, unique_topic)
    token = _official(ops, tmp_path, env)

    def caucus(*args: str) -> dict:
        return json.loads(ops.ok(ops.run([*args, "--json"], cwd=tmp_path, env=env)).stdout)

    def records() -> int:
        return int(caucus("log", "info")["records"])

    first = caucus("simulate", "write", "--units", "12", "--token", token)
    size = records()
    assert size == first["appended"] == sum(first["events"].values())
    again = caucus("simulate", "write", "--units", "12", "--token", token)
    assert (again["appended"], again["already_present"], records()) == (0, size, size)
    dump = ops.ok(ops.run(["log", "tail", "-n", "0", "--json"], cwd=tmp_path, env=env)).stdout
    (tmp_path / "log.jsonl").write_text(dump)
    restored = json.loads(ops.ok(ops.run(["log", "append", str(tmp_path / "log.jsonl"), "--token", token, "--json"],
                                         cwd=tmp_path, env=env)).stdout)
    assert len(restored) == size and not any(line["appended"] for line in restored) and records() == size
    ops.need_data()
    imported = caucus("import", "idp2020", "--data", str(ops.DATA))
    assert imported["appended"] == sum(imported["events"].values()) and records() == size + imported["appended"]
    twice = caucus("import", "idp2020", "--data", str(ops.DATA))
    assert (twice["appended"], twice["already_present"]) == (0, imported["appended"])
    assert records() == size + imported["appended"]
