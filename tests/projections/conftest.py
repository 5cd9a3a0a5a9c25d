"""Fixtures of the projection tests: synthetic elections, both stores, logs to project from.

``support`` is the helper module (``support.py`` next to this file: synthetic elections and logs,
producing to Kafka, store snapshots), loaded by path because tests run with
``--import-mode=importlib``. ``store_kind`` parametrises a test over SQLite and PostgreSQL (a module
may widen it to the in-memory store, ``memory``);
``open_store`` opens (another connection to) the test's store, so restarts and concurrent runners
each get their own connection as separate processes would.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from ledger.events import Event
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from projections.stores.port import ProjectionStore
from tests.shared_data import IOWA2020

_HERE = Path(__file__).resolve().parent
REPO_ROOT = _HERE.parents[1]
IOWA_DIR = IOWA2020


def _load_support() -> ModuleType:
    name = "caucus_projection_tests_support"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, _HERE / "support.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def support() -> ModuleType:
    return _load_support()


@pytest.fixture(params=["sqlite", "postgres"])
def store_kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def open_store(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Callable[[], ProjectionStore]]:
    """A factory: each call opens a new connection to this test's (initially empty) store."""
    opened: list[ProjectionStore] = []
    if store_kind == "postgres":
        dsn = request.getfixturevalue("pg_dsn")
        from projections.stores.postgres import PostgresStore

        def make() -> ProjectionStore:
            s = PostgresStore(dsn)
            opened.append(s)
            return s
    elif store_kind == "memory":
        from projections.stores.memory import MemoryStore, forget

        name = f"test-{tmp_path}"
        request.addfinalizer(lambda: forget(name))

        def make() -> ProjectionStore:
            s = MemoryStore(name)
            opened.append(s)
            return s
    else:
        from projections.stores.sqlite import SqliteStore

        path = tmp_path / "store.sqlite3"

        def make() -> ProjectionStore:
            s = SqliteStore(path)
            opened.append(s)
            return s

    yield make
    for s in opened:
        try:
            s.close()
        except Exception:  # noqa: BLE001 - already closed by the test
            pass


@pytest.fixture
def database_url(store_kind: str, request: pytest.FixtureRequest) -> str | None:
    """The ``--database`` value for CLI runs against this test's store (None: embedded SQLite)."""
    return str(request.getfixturevalue("pg_dsn")) if store_kind == "postgres" else None


@pytest.fixture
def embedded_log(tmp_path: Path) -> Callable[..., SqliteLog]:
    """``embedded_log(events, partitions=8)``: a fresh SQLite log at ``tmp_path/data/log.sqlite3``."""

    def make(events: Sequence[Event[Any]] = (), partitions: int = 8) -> SqliteLog:
        log = SqliteLog(tmp_path / "data" / "log.sqlite3", partitions=partitions)
        if events:
            Journal(log).append_batch(list(events))
        return log

    return make
