"""Fixtures for tests that need real components: a Kafka-protocol broker and PostgreSQL.

Tests only request fixtures; there are no markers to set. Everything is lazy: a test that needs neither
Kafka nor PostgreSQL starts neither. One Tansu broker serves the whole session (it starts in milliseconds,
but clients and topics are cheaper to isolate by name than by broker); each test gets its own topic name
and its own database.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from infra.broker import LocalBroker
from infra.postgres import ensure_running, temporary_database


@pytest.fixture(autouse=True, scope="session")
def _own_key_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The session signs with a key of its own (``CAUCUS_KEY_HOME``), never the machine's ~/.config/caucus:
    a key left there by another run or a person would otherwise be trusted by default."""
    saved = os.environ.get("CAUCUS_KEY_HOME")
    os.environ["CAUCUS_KEY_HOME"] = str(tmp_path_factory.mktemp("key-home"))
    yield
    if saved is None:
        os.environ.pop("CAUCUS_KEY_HOME", None)
    else:
        os.environ["CAUCUS_KEY_HOME"] = saved


@pytest.fixture(scope="session")
def _session_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalBroker]:
    broker = LocalBroker(run_dir=tmp_path_factory.mktemp("broker"))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(_session_broker: LocalBroker) -> str:
    """``"127.0.0.1:PORT"`` of the session's broker. The port never changes, even across ``broker.restart()``."""
    return _session_broker.bootstrap


@pytest.fixture
def broker(_session_broker: LocalBroker) -> Iterator[LocalBroker]:
    """The session's LocalBroker, for tests that stop, kill or restart it.

    A restart empties the broker for every later test too (memory only), which is why tests create their
    own topics. If the test leaves the broker stopped, it is started again (same port) afterwards.
    """
    yield _session_broker
    if not _session_broker.is_running():
        _session_broker.start()


@pytest.fixture
def unique_topic() -> str:
    """A topic name no other test uses: ``t-<8 hex>``. Not created; see ``ledger.log.kafka.provision_topic``."""
    return f"t-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="session")
def pg_server() -> str:
    """DSN of the local PostgreSQL, started if it was not running."""
    return ensure_running()


@pytest.fixture
def pg_dsn(pg_server: str) -> Iterator[str]:
    """DSN of a new, empty database for this test; dropped afterwards (open connections are ended)."""
    with temporary_database("test", pg_server) as dsn:
        yield dsn
