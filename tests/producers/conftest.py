"""Fixtures of the intake tests: a small election, credentials, and intakes over either log.

``log_kind`` parametrises a test over the embedded SQLite log and the session's Kafka-protocol broker;
``connect`` opens (another connection to) the test's log, as a separate process would. Kafka tests are
skipped while the Kafka adapter is not there.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ledger.events import Channel
from ledger.journal import Journal, LoggedEvent
from ledger.log.port import EventLog
from ledger.log.sqlite import SqliteLog
from producers.commands import CommandKind
from producers.credentials import Credential, CredentialStore
from producers.intake import Intake, Outcome, Submission

PARTITIONS = 4

ELECTION: dict[str, Any] = {
    "election_id": "ia-test",
    "name": "Test caucus",
    "rule_set": "idp-2020",
    "candidates": ["Biden", "Buttigieg", "Sanders", "Warren", "Uncommitted"],
    "counties": [
        {"county_id": "lee", "name": "Lee", "sde_ratio": "21/150"},
        {"county_id": "sat2", "name": "CD2 Satellite", "sde_ratio": "1"},
    ],
    "satellite_groups": [{"group_id": "cd2", "name": "CD2 Satellite", "sde_pool": 11}],
    "units": [
        {"unit_id": "FM5", "name": "Fort Madison 5", "county_id": "lee", "delegates": 12},
        {"unit_id": "E01", "name": "Example 1", "county_id": "lee", "delegates": 5},
        {"unit_id": "E10", "name": "Example 10", "county_id": "lee", "delegates": 6},
        {"unit_id": "UIHC", "name": "UIHC 7:45 pm", "county_id": "sat2", "satellite_group": "cd2"},
    ],
    "idempotency_key": "define-ia-test",
}

# RULES.md E06: Lee FM5, D=12, T=91 -> 3 / 5 / 4
FM5_REPORT: dict[str, Any] = {
    "first_alignment": {"Biden": 25, "Buttigieg": 35, "Sanders": 31},
    "final_alignment": {"Biden": 25, "Buttigieg": 35, "Sanders": 31},
    "attendance": 91,
    "delegates_reported": {"Biden": 3, "Buttigieg": 5, "Sanders": 4},
}


@pytest.fixture
def election() -> dict[str, Any]:
    """The test election's definition (a fresh copy)."""
    return json.loads(json.dumps(ELECTION))


@pytest.fixture
def fm5() -> dict[str, Any]:
    """A valid report for unit FM5 (RULES.md worked example E06), without key or unit."""
    return json.loads(json.dumps(FM5_REPORT))


@pytest.fixture(params=["embedded", "kafka"])
def log_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def connect(log_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[], EventLog]]:
    """Opens the test's log; every call is a new connection (closed at the end if still open)."""
    opened: list[EventLog] = []
    if log_kind == "embedded":
        path = tmp_path / "log.sqlite3"

        def open_log() -> EventLog:
            log = SqliteLog(path, partitions=PARTITIONS, timeout=0.2)
            opened.append(log)
            return log

    else:
        kafka = pytest.importorskip("ledger.log.kafka", reason="the Kafka adapter (ledger.log.kafka) is not there yet")
        from infra.topics import provision_topic

        bootstrap = request.getfixturevalue("kafka_bootstrap")
        topic = request.getfixturevalue("unique_topic")
        provision_topic(bootstrap, topic, partitions=PARTITIONS)

        def open_log() -> EventLog:
            log = kafka.KafkaLog(bootstrap, topic, partitions=PARTITIONS, timeout=3.0)
            opened.append(log)
            return log

    yield open_log
    for log in opened:
        try:
            log.close()
        except Exception:  # noqa: BLE001 - already closed by the intake, or the broker is gone
            pass


@pytest.fixture
def store(tmp_path: Path) -> CredentialStore:
    return CredentialStore(tmp_path / "credentials.json")


@pytest.fixture
def official(store: CredentialStore) -> Credential:
    return store.issue("official", name="Pat Official")[0]


@pytest.fixture
def chair(store: CredentialStore) -> Credential:
    return store.issue("chair", unit_id="FM5")[0]


@pytest.fixture
def make_intake(connect: Callable[[], EventLog], tmp_path: Path) -> Iterator[Callable[..., Intake]]:
    """Starts an intake over the test's log; a second call is a restart (same directory)."""
    made: list[Intake] = []

    def make(workdir: Path | None = None) -> Intake:
        intake = Intake(connect, workdir or tmp_path / "intake", name="test-log").start()
        made.append(intake)
        return intake

    yield make
    for intake in made:
        intake.close()


@pytest.fixture
def intake(make_intake: Callable[..., Intake]) -> Intake:
    return make_intake()


@pytest.fixture
def send(intake: Intake, official: Credential) -> Callable[..., Outcome]:
    """``send(kind, body, sender=official, unit=None, key=None)``: one submission through the intake."""

    def submit(kind: CommandKind, text: str | bytes, sender: Any = None, unit: str | None = None, key: str | None = None) -> Outcome:
        return intake.submit(Submission(kind, text, sender or official, Channel.APP, unit_id=unit, idempotency_key=key))

    return submit


@pytest.fixture
def defined(send: Callable[..., Outcome]) -> Outcome:
    outcome = send(CommandKind.DEFINE, json.dumps(ELECTION))
    assert outcome.accepted, outcome.to_json()
    return outcome


@pytest.fixture
def logged(connect: Callable[[], EventLog]) -> Callable[[], list[LoggedEvent]]:
    """``logged()``: every event in the test's log, read through a fresh connection."""

    def read() -> list[LoggedEvent]:
        journal = Journal(connect())
        try:
            return list(journal.read())
        finally:
            journal.close()

    return read
