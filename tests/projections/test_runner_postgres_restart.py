"""PostgreSQL restarts under a running runner: it waits for the database, reconnects and carries on,
and the tallies equal a clean replay (nothing lost, nothing counted twice).

The server is a private cluster (``infra.postgres.PrivateCluster``): restarting the shared one
would cut every other test's connections."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from infra.postgres import PrivateCluster
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from projections.runner import ProjectionRunner
from projections.sources import EmbeddedSource
from projections.stores.port import Changes, StoreUnavailable
from projections.stores.postgres import PostgresStore
from projections.stores.sqlite import SqliteStore


@pytest.fixture
def cluster() -> Iterator[PrivateCluster]:
    with PrivateCluster() as c:
        yield c


def test_postgres_restarts_under_the_runner_and_it_carries_on(support: ModuleType, cluster: PrivateCluster, tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    events = support.election_log(40, corrections=2, rejections=1)
    Journal(SqliteLog(path, partitions=4)).append_batch(events)
    store = PostgresStore(cluster.dsn, connect_timeout=2)
    sid = store.ensure_serving("tally", source="embedded").set_id
    commits: list[int] = []
    restarter: list[threading.Thread] = []

    def outages(_changes: Changes, _positions: dict[int, int]) -> None:
        commits.append(1)
        if len(commits) == 3:
            cluster.restart()  # open connections are cut; the server is back at once
        elif len(commits) == 6:
            cluster.stop()  # connections refused until the server is started again
            restarter.append(threading.Timer(1.5, cluster.start))
            restarter[0].start()

    runner = ProjectionRunner(store, sid, EmbeddedSource(SqliteLog(path)), batch_size=10, on_commit=outages,
                              store_retry_seconds=60)
    progress = runner.run(until_caught_up=True)
    restarter[0].join()
    assert progress.store_outages == 2, "both outages happened mid-run and were waited out"
    assert progress.applied == len(events) and progress.waiting_for_store == ""

    clean = SqliteStore(tmp_path / "clean.sqlite3")
    clean_sid = clean.ensure_serving("tally", source="embedded").set_id
    ProjectionRunner(clean, clean_sid, EmbeddedSource(SqliteLog(path)), batch_size=1000).run(until_caught_up=True)
    assert support.snapshot(store, sid) == support.snapshot(clean, clean_sid)
    store.close()


def test_a_database_that_stays_away_ends_the_runner_with_a_clear_error(support: ModuleType, cluster: PrivateCluster, tmp_path: Path) -> None:
    path = tmp_path / "log.sqlite3"
    events = support.election_log(10)
    Journal(SqliteLog(path, partitions=4)).append_batch(events)
    store = PostgresStore(cluster.dsn, connect_timeout=1)
    sid = store.ensure_serving("tally", source="embedded").set_id
    waits: list[float] = []

    def stop_once(_changes: Changes, _positions: dict[int, int]) -> None:
        if not waits:
            cluster.stop()

    runner = ProjectionRunner(store, sid, EmbeddedSource(SqliteLog(path)), batch_size=5, on_commit=stop_once,
                              store_retry_seconds=2, sleep=waits.append)
    with pytest.raises(StoreUnavailable, match="projection store database"):
        runner.run(until_caught_up=True)
    assert waits and runner.progress.store_outages == 1
    assert 0 < runner.progress.applied < len(events), "what was committed before the outage stays committed"
