"""Fixtures of the intake tests: a small election, credentials, and intakes over either log.

``log_kind`` parametrises a test over the embedded SQLite log and the session's Kafka-protocol broker;
``connect`` opens (another connection to) the test's log, as a separate process would. Kafka tests are
skipped while the Kafka adapter is not there. ``serve_intake`` runs the real HTTP service (uvicorn) in
its own process, for tests that need real sockets, keep-alive connections or the server's own limits.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
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
        from ledger.log.kafka import provision_topic

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


class Served:
    """A ``caucus serve intake`` process on a loopback port, over the embedded log in ``data_dir``."""

    def __init__(self, process: subprocess.Popen[bytes], port: int, data_dir: Path, token: str, output: Path) -> None:
        self.process = process
        self.output_path = output
        self.base = f"http://127.0.0.1:{port}"
        self.data_dir = data_dir
        self.official = {"Authorization": f"Bearer {token}"}

    @property
    def log_path(self) -> Path:
        return self.data_dir / "log.sqlite3"

    def rss_kib(self) -> int:
        """The server's resident memory (VmRSS), in KiB."""
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
        raise AssertionError("no VmRSS line")

    def output(self) -> str:
        """What the service printed (to a file: a pipe nobody reads would block it once full)."""
        return self.output_path.read_text(errors="replace")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def serve_intake(tmp_path: Path) -> Iterator[Callable[..., Served]]:
    """``serve_intake(retry_seconds=5.0)``: start the real HTTP intake (uvicorn, in its own process) over
    a fresh embedded data directory, with an official's token; it is stopped (SIGTERM) at the end."""
    started: list[Served] = []

    def start(retry_seconds: float = 5.0) -> Served:
        data_dir = tmp_path / f"served-{len(started)}"
        _, token = CredentialStore(data_dir / "credentials.json").issue("official", name="Pat")
        env = {**os.environ, "CAUCUS_DATA_DIR": str(data_dir)}
        env.pop("CAUCUS_KAFKA", None)
        port = _free_port()
        output = tmp_path / f"served-{len(started)}.out"
        with open(output, "wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-c", "from ledger.cli import main; main()", "serve", "intake", "--port", str(port),
                 "--retry-seconds", str(retry_seconds)],
                env=env, stdout=out, stderr=subprocess.STDOUT,
            )  # fmt: skip
        served = Served(process, port, data_dir, token, output)
        started.append(served)
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{served.base}/health", timeout=1).status_code == 200:
                    return served
            except httpx.HTTPError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"the intake service did not come up: {served.output()}")
            time.sleep(0.1)

    yield start
    for served in started:
        if served.process.poll() is None:
            served.process.send_signal(signal.SIGTERM)
            try:
                served.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                served.process.kill()
                served.process.wait()
