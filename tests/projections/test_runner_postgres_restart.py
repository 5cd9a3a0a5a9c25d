"""PostgreSQL restarts under a running runner: it waits for the database, reconnects and carries on,
and the tallies equal a clean replay (nothing lost, nothing counted twice).

The server is a private cluster (``infra.postgres.PrivateCluster``): restarting the shared one
would cut every other test's connections."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

from infra.postgres import PrivateCluster
from ledger.config import Settings
from ledger.journal import Journal
from ledger.log.sqlite import SqliteLog
from projections.replay import rebuild
from projections.runner import ProjectionRunner
from projections.set_builders import shown_state
from projections.sources import EmbeddedSource
from projections.stores.port import Changes, StoreUnavailable
from projections.stores.postgres import PostgresStore
from projections.stores.sqlite import SqliteStore
from projections.wiring import serving_set


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


@pytest.mark.parametrize("promote", [True, False], ids=["promoted", "built-only"])
def test_a_restart_at_a_replays_last_step_is_waited_out(support: ModuleType, cluster: PrivateCluster, tmp_path: Path,
                                                        promote: bool, caplog: pytest.LogCaptureFixture) -> None:
    """The connection lost after the last batch, before the set is promoted (or marked built): the
    replay had built its whole set and ended with the driver's error, leaving it ``building`` with
    no builder. It now waits the outage out as a batch does, and finishes."""
    data = tmp_path / "data"
    path = data / "log.sqlite3"
    Journal(SqliteLog(path, partitions=4)).append_batch(support.election_log(12, corrections=1))
    settings = Settings(data_dir=data, database=cluster.dsn)
    store = PostgresStore(cluster.dsn, connect_timeout=2)
    old = serving_set(store, settings)
    ProjectionRunner(store, old.set_id, EmbeddedSource(SqliteLog(path)), batch_size=50).run(until_caught_up=True)
    total = sum(SqliteLog(path).high_watermarks().values())
    restarts: list[int] = []

    def restart_after_the_last_batch(_changes: Changes, positions: dict[int, int]) -> None:
        if sum(positions.values()) == total and not restarts:
            restarts.append(1)
            cluster.restart()  # every open connection is cut; the next statement on one fails

    with caplog.at_level(logging.WARNING, logger="projections.replay"):
        outcome = rebuild(store, settings, batch_size=20, source=lambda: EmbeddedSource(SqliteLog(path)), poll_timeout=0.01,
                          on_commit=restart_after_the_last_batch, promote=promote)
    assert restarts, "the outage came after the last batch"
    assert "the replay's last step" in caplog.text, "the outage met the last step, not a batch"
    assert outcome.progress.caught_up and outcome.promoted is promote
    after = store.get_set(outcome.built.set_id)
    assert shown_state(after) == ("serving" if promote else "built") == shown_state(outcome.built)
    assert (store.serving("tally").set_id == after.set_id) is promote  # type: ignore[union-attr]
    assert support.snapshot(store, after.set_id) == support.snapshot(store, old.set_id)
    store.close()
