"""The project's own intake for the driver tests: in-process over an embedded log, and behind the real
HTTP service (uvicorn on a free port), each with an official's credential."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import uvicorn

from ledger.log.sqlite import SqliteLog
from producers.credentials import Credential, CredentialStore
from producers.http import create_app
from producers.intake import Intake


@pytest.fixture
def store(tmp_path: Path) -> CredentialStore:
    return CredentialStore(tmp_path / "credentials.json")


@pytest.fixture
def official(store: CredentialStore) -> tuple[Credential, str]:
    """An official's credential and its bearer token."""
    return store.issue("official", name="Load Tester")


@pytest.fixture
def log_path(tmp_path: Path) -> Path:
    return tmp_path / "log.sqlite3"


@pytest.fixture
def intake(tmp_path: Path, log_path: Path) -> Iterator[Intake]:
    intake = Intake(lambda: SqliteLog(log_path, partitions=4), tmp_path / "intake", name="sim-test").start()
    yield intake
    intake.close()


@pytest.fixture
def intake_url(intake: Intake, store: CredentialStore) -> Iterator[str]:
    app = create_app(intake, store, retry_seconds=60, snapshot_seconds=600)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        thread.join(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
